package clerk

import (
	"fmt"
	"slices"
	"testing"
)

// TestSubsetKeepsNumberingWhenADistributorFails checks that a failed
// Distributor listed as down moves only the clients whose subset held it,
// each by exactly one Distributor, while dropping it from the list instead
// renumbers the others and moves clients that never used it.
func TestSubsetKeepsNumberingWhenADistributorFails(t *testing.T) {
	const n, k, clients = 12, 3, 600
	var dists []string
	for i := range n {
		dists = append(dists, fmt.Sprintf("10.0.0.%d:7070", 10+i))
	}
	failed := dists[n/2] // in the middle of the sorted list
	var live []string
	for _, d := range dists {
		if d != failed {
			live = append(live, d)
		}
	}
	var held, movedDown, movedDropped int
	for f := range uint64(clients) {
		before, _ := subsetOf(f, k, dists, nil)
		withDown, restDown := subsetOf(f, k, live, []string{failed})
		dropped, _ := subsetOf(f, k, live, nil)
		if len(withDown) != k || slices.Contains(withDown, failed) || slices.Contains(restDown, failed) {
			t.Fatalf("frontend %d: subset %v, rest %v with %s down; want %d live Distributors and the down one nowhere",
				f, withDown, restDown, failed, k)
		}
		if len(withDown)+len(restDown) != len(live) {
			t.Fatalf("frontend %d: subset %v and rest %v do not cover the %d live Distributors", f, withDown, restDown, len(live))
		}
		changed := k - overlap(before, withDown)
		if slices.Contains(before, failed) {
			held++
			if changed != 1 {
				t.Errorf("frontend %d: subset %v became %v when %s failed; want exactly it replaced", f, before, withDown, failed)
			}
		} else if changed != 0 {
			t.Errorf("frontend %d: subset %v became %v though it did not hold the failed %s", f, before, withDown, failed)
		}
		if changed > 0 {
			movedDown++
		}
		if k-overlap(before, dropped) > 0 {
			movedDropped++
		}
	}
	t.Logf("%d of %d clients held the failed Distributor; %d moved with it listed as down, %d with it dropped from the list",
		held, clients, movedDown, movedDropped)
	if movedDropped <= movedDown {
		t.Errorf("dropping the failed Distributor moved %d clients, listing it as down %d; want down to move fewer", movedDropped, movedDown)
	}
}

func overlap(a, b []string) int {
	n := 0
	for _, x := range a {
		if slices.Contains(b, x) {
			n++
		}
	}
	return n
}
