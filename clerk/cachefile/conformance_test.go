package cachefile

import (
	"bytes"
	"encoding/base64"
	"flag"
	"strconv"
	"testing"

	"github.com/slicerd/slicerd/api/conformance"
	"github.com/slicerd/slicerd/assign"
)

// api/conformance/cachefile.json: one cache file as Encode writes it, for
// clients in other languages that keep the Go Clerk's format (the Python
// Clerk does) to read and write byte for byte. go test
// ./clerk/cachefile/ -run Conformance -update writes it.

var updateConformance = flag.Bool("update", false, "rewrite api/conformance/cachefile.json")

const cacheVector = "../../api/conformance/cachefile.json"

type cacheFileVector struct {
	About       string `json:"about"`
	Job         string `json:"job"`
	Generation  string `json:"generation"`
	Incarnation string `json:"incarnation"`
	// Bytes is the file, base64 (standard, padded).
	Bytes string `json:"bytes"`
}

func conformanceAssignment() *assign.Assignment {
	const end = assign.KeySpaceEnd
	return &assign.Assignment{Job: "kv", Generation: 7, Incarnation: "0123456789abcdef0123456789abcdef",
		Tasks: []assign.Task{{Name: "kv-0", Addr: "10.0.0.1:8080"}, {Name: "kv-1", Addr: "[fd00::2]:8080"}},
		Slices: []assign.Slice{
			{Start: 0, End: 1 << 61, Tasks: []string{"kv-0"}},
			{Start: 1 << 61, End: 1 << 62, Tasks: []string{"kv-0", "kv-1"}},
			{Start: 1 << 62, End: end, Tasks: []string{"kv-1"}},
		}}
}

func TestConformanceFile(t *testing.T) {
	a := conformanceAssignment()
	data, err := Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	if *updateConformance {
		v := cacheFileVector{
			About: "A Clerk cache file (clerk/cachefile, format 2) of the assignment job/generation/incarnation, as the Go Clerk writes it. docs/client-contract.md, section 5.",
			Job:   a.Job, Generation: strconv.FormatUint(a.Generation, 10), Incarnation: a.Incarnation,
			Bytes: base64.StdEncoding.EncodeToString(data),
		}
		if err := conformance.WriteJSON(cacheVector, v); err != nil {
			t.Fatal(err)
		}
	}
	var v cacheFileVector
	if err := conformance.ReadJSON(cacheVector, &v); err != nil {
		t.Fatalf("%v (go test ./clerk/cachefile/ -run Conformance -update writes it)", err)
	}
	stored, err := base64.StdEncoding.DecodeString(v.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, data) {
		t.Error("Encode no longer writes the vector's bytes: the format changed; bump its version and rewrite the vector")
	}
	got, err := Decode(stored)
	if err != nil {
		t.Fatal(err)
	}
	if !assign.Equal(got, a) || got.Incarnation != v.Incarnation || strconv.FormatUint(got.Generation, 10) != v.Generation {
		t.Errorf("the vector decodes to %+v, want %+v", got, a)
	}
}
