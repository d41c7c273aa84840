package cli

import (
	"testing"

	"github.com/slicerd/slicerd/slicelet"
)

// The handle table numbers handles from a random point (another table,
// as in a restarted sidecar, from another), forgets released ones, and at
// its bound first lets go of handles that no longer hold their keys
// (these, never owned, all qualify), then refuses.
func TestHandleTable(t *testing.T) {
	var tab handleTable
	id, err := tab.add(slicelet.Handle{})
	if err != nil || id <= 1<<32 {
		t.Fatalf("first add = %d, %v; want a number above 2^32", id, err)
	}
	if other := (&handleTable{}); func() uint64 { id, _ := other.add(slicelet.Handle{}); return id }() == id {
		t.Fatalf("two tables (two sidecar processes) both numbered their first handle %d", id)
	}
	if _, ok := tab.get(id); !ok {
		t.Fatal("the first handle is not held")
	}
	if _, ok := tab.remove(id); !ok {
		t.Fatal("the first handle could not be removed")
	}
	if _, ok := tab.remove(id); ok {
		t.Fatal("the first handle was removed twice")
	}
	for range localMaxHandles {
		if _, err := tab.add(slicelet.Handle{}); err != nil {
			t.Fatal(err)
		}
	}
	// At the bound: every held handle is discontinuous, so they go and
	// the new one is taken.
	if id, err := tab.add(slicelet.Handle{}); err != nil || len(tab.held) != 1 {
		t.Fatalf("add at the bound = %d, %v, %d held; want the stale handles dropped", id, err, len(tab.held))
	}
	tab.releaseAll()
	if len(tab.held) != 0 {
		t.Fatalf("%d handles held after releaseAll", len(tab.held))
	}
}
