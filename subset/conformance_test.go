package subset

import (
	"flag"
	"slices"
	"strconv"
	"testing"

	"github.com/slicerd/slicerd/api/conformance"
)

// api/conformance/subset.json: the Distributors a client prefers, as this
// package computes them, for clients in other languages to reproduce
// (docs/client-contract.md, section 4). go test ./subset/ -run
// Conformance -update writes it.

var updateConformance = flag.Bool("update", false, "rewrite api/conformance/subset.json")

const subsetVectors = "../api/conformance/subset.json"

type subsetFile struct {
	About         string           `json:"about"`
	FrontendIndex []frontendCase   `json:"frontend_index"`
	Rocksteadier  []rocksteadyCase `json:"rocksteadier"`
}

type frontendCase struct {
	ID string `json:"id"`
	// Frontend is a decimal string: JSON numbers lose precision above
	// 2^53.
	Frontend string `json:"frontend"`
}

type rocksteadyCase struct {
	Frontend string `json:"frontend"`
	N        int    `json:"n"`
	K        int    `json:"k"`
	Order    []int  `json:"order"`
}

func conformanceSubsets() subsetFile {
	f := subsetFile{About: "subset.FrontendIndex (XXH64 of a client's ID) and subset.Rocksteadier (the indices, among the Distributors sorted by address, a frontend prefers, in order); frontends are decimal strings. docs/client-contract.md."}
	frontends := []uint64{1<<64 - 1, 1 << 63, 12345, 19}
	for _, id := range []string{"", "client-a", "host-1:4242", "kv-7", "日本語"} {
		fi := FrontendIndex(id)
		f.FrontendIndex = append(f.FrontendIndex, frontendCase{ID: id, Frontend: strconv.FormatUint(fi, 10)})
		frontends = append(frontends, fi)
	}
	for i := range uint64(12) {
		frontends = append(frontends, i)
	}
	for _, fr := range frontends {
		for _, n := range []int{1, 2, 3, 5, 10, 11, 19, 25, 100, 171} {
			// Subsets of 3 (the default), of up to 12, and, for few
			// Distributors, larger than their number.
			ks := []int{min(3, n), min(12, n)}
			if n <= 11 {
				ks = append(ks, n+1)
			}
			for _, k := range slices.Compact(ks) {
				f.Rocksteadier = append(f.Rocksteadier, rocksteadyCase{Frontend: strconv.FormatUint(fr, 10), N: n, K: k, Order: Rocksteadier(fr, n, k)})
			}
		}
	}
	return f
}

func TestConformanceSubsets(t *testing.T) {
	want := conformanceSubsets()
	if *updateConformance {
		if err := conformance.WriteJSON(subsetVectors, want); err != nil {
			t.Fatal(err)
		}
	}
	var got subsetFile
	if err := conformance.ReadJSON(subsetVectors, &got); err != nil {
		t.Fatalf("%v (go test ./subset/ -run Conformance -update writes it)", err)
	}
	if len(got.Rocksteadier) == 0 || len(got.FrontendIndex) == 0 {
		t.Fatal("no subset vectors")
	}
	for _, c := range got.FrontendIndex {
		if f := strconv.FormatUint(FrontendIndex(c.ID), 10); f != c.Frontend {
			t.Errorf("FrontendIndex(%q) = %s, the vectors say %s", c.ID, f, c.Frontend)
		}
	}
	for _, c := range got.Rocksteadier {
		fr, err := strconv.ParseUint(c.Frontend, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if o := Rocksteadier(fr, c.N, c.K); !slices.Equal(o, c.Order) {
			t.Errorf("Rocksteadier(%d, %d, %d) = %v, the vectors say %v", fr, c.N, c.K, o, c.Order)
		}
	}
}
