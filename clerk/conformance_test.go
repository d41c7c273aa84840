package clerk

import (
	"bytes"
	"encoding/base64"
	"flag"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/slicerd/slicerd/api"
	"github.com/slicerd/slicerd/api/conformance"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/subset"
)

// The language-neutral conformance vectors in api/conformance
// (docs/client-contract.md): every client, in any language, must compute
// the same slice keys and route every key to the same tasks. This Go
// Clerk passes them; go test ./clerk/ -run Conformance -update writes them
// from the cases below.

var updateConformance = flag.Bool("update", false, "rewrite api/conformance from this file's cases")

const (
	hashVectors   = "../api/conformance/hash.json"
	lookupVectors = "../api/conformance/lookup.json"
)

// hashFile is api/conformance/hash.json.
type hashFile struct {
	About string     `json:"about"`
	Cases []hashCase `json:"cases"`
}

type hashCase struct {
	// Key is the key's bytes in base64 (standard, padded); Text is the
	// same key as text, when it is valid UTF-8.
	Key  string `json:"key"`
	Text string `json:"text,omitempty"`
	// SliceKey is XXH64(key, seed 0) >> 1, a decimal string (JSON
	// numbers lose precision above 2^53).
	SliceKey string `json:"slice_key"`
}

// The lookup vectors' stored form.
type (
	lookupFile = conformance.LookupFile
	lookupCase = conformance.LookupCase
	lookup     = conformance.Lookup
)

func conformanceKeys() [][]byte {
	keys := [][]byte{[]byte(""), []byte("a"), []byte("user:42"), []byte("hello world"), []byte("slicerd"), {0x00, 0xff},
		[]byte("kü"), []byte("日本語"), bytes.Repeat([]byte("x"), 31), bytes.Repeat([]byte("y"), 32), bytes.Repeat([]byte("z"), 33),
		bytes.Repeat([]byte{0xab}, 1000)}
	for i := range 20 {
		keys = append(keys, []byte("key-"+strconv.Itoa(i)))
	}
	return keys
}

func conformanceAssignments() map[string]*assign.Assignment {
	const end = assign.KeySpaceEnd
	return map[string]*assign.Assignment{
		"one task": {Job: "kv", Generation: 1, Incarnation: "inc-a",
			Tasks:  []assign.Task{{Name: "kv-0", Addr: "10.0.0.1:8080"}},
			Slices: []assign.Slice{{Start: 0, End: end, Tasks: []string{"kv-0"}}}},
		"uneven slices, replicas and a task on two slices": {Job: "kv", Generation: 7, Incarnation: "inc-b",
			Tasks: []assign.Task{{Name: "kv-0", Addr: "10.0.0.1:8080"}, {Name: "kv-1", Addr: "10.0.0.2:8080"}, {Name: "kv-2", Addr: "[fd00::3]:8080"}},
			Slices: []assign.Slice{
				{Start: 0, End: 1, Tasks: []string{"kv-2"}},
				{Start: 1, End: 1 << 61, Tasks: []string{"kv-0", "kv-1"}},
				{Start: 1 << 61, End: 1<<62 + 12345, Tasks: []string{"kv-1"}},
				{Start: 1<<62 + 12345, End: end - 1, Tasks: []string{"kv-0", "kv-1", "kv-2"}},
				{Start: end - 1, End: end, Tasks: []string{"kv-0"}},
			}},
	}
}

func TestConformanceHash(t *testing.T) {
	var want hashFile
	if *updateConformance {
		want.About = "Slice keys: XXH64(key, seed 0) >> 1. docs/client-contract.md."
		for _, k := range conformanceKeys() {
			c := hashCase{Key: base64.StdEncoding.EncodeToString(k), SliceKey: strconv.FormatUint(uint64(assign.HashKey(k)), 10)}
			if utf8.Valid(k) {
				c.Text = string(k)
			}
			want.Cases = append(want.Cases, c)
		}
		writeJSON(t, hashVectors, want)
	}
	readJSON(t, hashVectors, &want)
	if len(want.Cases) == 0 {
		t.Fatal("no hash vectors")
	}
	for _, c := range want.Cases {
		k, err := base64.StdEncoding.DecodeString(c.Key)
		if err != nil {
			t.Fatalf("%q: %v", c.Key, err)
		}
		if got := strconv.FormatUint(uint64(assign.HashKey(k)), 10); got != c.SliceKey {
			t.Errorf("slice key of %q = %s, want %s", k, got, c.SliceKey)
		}
		if c.Text != "" && assign.HashString(c.Text) != assign.HashKey(k) {
			t.Errorf("%q hashes differently as text and as bytes", c.Text)
		}
	}
}

func TestConformanceLookup(t *testing.T) {
	var want lookupFile
	if *updateConformance {
		want.About = "Key → the slice's tasks and their addresses, for slicer.v1.Assignment messages in JSON. docs/client-contract.md."
		as := conformanceAssignments()
		for _, name := range slices.Sorted(maps.Keys(as)) {
			a := as[name]
			raw, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(api.ToProto(a))
			if err != nil {
				t.Fatal(err)
			}
			c := lookupCase{Name: name, Assignment: raw}
			add := func(key []byte, h assign.SliceKey) {
				sl := a.Slices[a.Find(h)]
				l := lookup{SliceKey: strconv.FormatUint(uint64(h), 10), Tasks: sl.Tasks}
				if key != nil {
					l.Key = base64.StdEncoding.EncodeToString(key)
				}
				for _, n := range sl.Tasks {
					i, _ := a.TaskIndex(n)
					l.Addresses = append(l.Addresses, a.Tasks[i].Addr)
				}
				c.Lookups = append(c.Lookups, l)
			}
			for _, k := range conformanceKeys() {
				add(k, assign.HashKey(k))
			}
			for _, s := range a.Slices { // every slice's first and last key
				add(nil, s.Start)
				add(nil, s.End-1)
			}
			want.Cases = append(want.Cases, c)
		}
		writeJSON(t, lookupVectors, want)
	}
	cases, err := conformance.ReadLookups(lookupVectors)
	if err != nil {
		t.Fatalf("%v (go test ./clerk/ -run Conformance -update writes it)", err)
	}
	for _, c := range cases {
		table := newTableAt(c.Assignment, time.Now())
		for _, l := range c.Lookups {
			i := table.Lookup(l.SliceKey)
			if !slices.Equal(table.Names(i), l.Tasks) || !slices.Equal(table.Addrs(i), l.Addresses) {
				t.Errorf("%s: slice key %d → %v at %v, want %v at %v", c.Name, l.SliceKey, table.Names(i), table.Addrs(i), l.Tasks, l.Addresses)
			}
		}
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	if err := conformance.WriteJSON(path, v); err != nil {
		t.Fatal(err)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	if err := conformance.ReadJSON(path, v); err != nil {
		t.Fatalf("%v (go test ./clerk/ -run Conformance -update writes it)", err)
	}
}

// api/conformance/preferred.json: the Distributors the Go Clerk prefers
// (subsetOf: the addresses sorted, those known to be down keeping their
// place in the numbering but skipped), for clients in other languages.
const preferredVectors = "../api/conformance/preferred.json"

type preferredFile struct {
	About string          `json:"about"`
	Cases []preferredCase `json:"cases"`
}

type preferredCase struct {
	Frontend  string   `json:"frontend"`
	K         int      `json:"k"`
	Live      []string `json:"live"`
	Down      []string `json:"down"`
	Preferred []string `json:"preferred"`
}

func conformancePreferred() preferredFile {
	f := preferredFile{About: "The Distributors a client with frontend number FRONTEND prefers, in order, with subsets of K, among the live ones, the down ones keeping their place in the numbering (the addresses are sorted first, as given in any order). docs/client-contract.md, section 4."}
	seven := []string{"10.0.0.5:7070", "10.0.0.1:7070", "10.0.0.3:7070", "10.0.0.2:7070", "10.0.0.4:7070", "10.0.0.7:7070", "10.0.0.6:7070"}
	var twelve []string
	for i := range 12 {
		twelve = append(twelve, "d"+strconv.Itoa(11-i)+".example:7070")
	}
	for _, fr := range []uint64{0, 1, 5, 13, 77, subset.FrontendIndex("client-a"), 1<<64 - 1} {
		for _, c := range []struct {
			k          int
			live, down []string
		}{
			{3, seven, nil},
			{3, seven[2:], seven[:2]},
			{2, seven[:2], nil},
			{3, twelve, nil},
			{4, twelve[3:], twelve[:3]},
			{1, twelve[:1], twelve[1:]},
		} {
			pref, _ := subsetOf(fr, c.k, c.live, c.down)
			f.Cases = append(f.Cases, preferredCase{Frontend: strconv.FormatUint(fr, 10), K: c.k,
				Live: slices.Clone(c.live), Down: slices.Clone(c.down), Preferred: pref})
		}
	}
	return f
}

func TestConformancePreferred(t *testing.T) {
	if *updateConformance {
		writeJSON(t, preferredVectors, conformancePreferred())
	}
	var want preferredFile
	readJSON(t, preferredVectors, &want)
	if len(want.Cases) == 0 {
		t.Fatal("no preferred-Distributor vectors")
	}
	for _, c := range want.Cases {
		fr, err := strconv.ParseUint(c.Frontend, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if pref, _ := subsetOf(fr, c.K, c.Live, c.Down); !slices.Equal(pref, c.Preferred) {
			t.Errorf("frontend %d, k %d, live %v, down %v: prefers %v, the vectors say %v", fr, c.K, c.Live, c.Down, pref, c.Preferred)
		}
	}
}
