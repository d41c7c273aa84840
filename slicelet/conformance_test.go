package slicelet

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
)

// TestConformanceLookup plays api/conformance/lookup.json
// (docs/client-contract.md) from a task's side: for every task of each
// assignment, a Slicelet of that task owns exactly the keys and slice keys
// the vectors route to it.
func TestConformanceLookup(t *testing.T) {
	var file struct {
		Cases []struct {
			Name       string          `json:"name"`
			Assignment json.RawMessage `json:"assignment"`
			Lookups    []struct {
				Key      string   `json:"key"`
				SliceKey string   `json:"slice_key"`
				Tasks    []string `json:"tasks"`
			} `json:"lookups"`
		} `json:"cases"`
	}
	raw, err := os.ReadFile("../api/conformance/lookup.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 {
		t.Fatal("no lookup vectors")
	}
	for _, c := range file.Cases {
		var p slicerv1.Assignment
		if err := protojson.Unmarshal(c.Assignment, &p); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		a, err := api.FromProto(&p)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		for _, task := range a.Tasks {
			s := newOffline(t, task.Name)
			a.Job = s.Job() // the vectors' job; the Slicelet checks only its own
			s.install(nil, a)
			ranges, _ := s.Ranges()
			for _, l := range c.Lookups {
				want := slices.Contains(l.Tasks, task.Name)
				h, err := strconv.ParseUint(l.SliceKey, 10, 64)
				if err != nil {
					t.Fatalf("%s: slice key %q: %v", c.Name, l.SliceKey, err)
				}
				if got := inRanges(ranges, assign.SliceKey(h)); got != want {
					t.Errorf("%s: task %s owns slice key %d: %v, want %v", c.Name, task.Name, h, got, want)
				}
				if l.Key == "" {
					continue
				}
				k, err := base64.StdEncoding.DecodeString(l.Key)
				if err != nil {
					t.Fatalf("%s: key %q: %v", c.Name, l.Key, err)
				}
				if got := s.IsAffinitizedKey(k); got != want {
					t.Errorf("%s: task %s owns key %q: %v, want %v", c.Name, task.Name, k, got, want)
				}
			}
		}
	}
}
