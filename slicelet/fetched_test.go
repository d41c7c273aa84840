package slicelet

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
)

// TestGainedRanges: the ranges a draining task's successors come to fetch
// are the parts of its ranges each newly serves, not the parts a task
// served already as a replica.
func TestGainedRanges(t *testing.T) {
	end := assign.SliceKey(assign.KeySpaceEnd)
	prev := &assign.Assignment{Generation: 1, Slices: []assign.Slice{
		{Start: 0, End: 100, Tasks: []string{"a"}},
		{Start: 100, End: 200, Tasks: []string{"a", "b"}},
		{Start: 200, End: end, Tasks: []string{"c"}},
	}}
	next := &assign.Assignment{Generation: 2, Slices: []assign.Slice{
		{Start: 0, End: 50, Tasks: []string{"c"}},
		{Start: 50, End: 150, Tasks: []string{"b", "d"}},
		{Start: 150, End: end, Tasks: []string{"b", "c"}},
	}}
	owned := []assign.Slice{{Start: 0, End: 200}}
	got := gained(prev, next, owned, "a")
	want := map[string][]assign.Slice{
		"c": {{Start: 0, End: 50}, {Start: 150, End: 200}},
		"b": {{Start: 50, End: 100}},
		"d": {{Start: 50, End: 100}, {Start: 100, End: 150}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("gained = %v, want %v", got, want)
	}
}

// TestFetchedSince: a drain waits until every gained range was fetched
// whole since it began, however the gaining task split its fetches; one
// fetch of several does not end it.
func TestFetchedSince(t *testing.T) {
	since := time.Unix(1000, 0)
	before, after := since.Add(-time.Second), since.Add(time.Second)
	want := map[string][]assign.Slice{"b": {{Start: 0, End: 100}, {Start: 300, End: 400}}}
	h := &handoffState{fetched: map[string][]fetchedRange{}}
	h.beginDrain()
	check := func(step string, wantDone bool) {
		t.Helper()
		if got := h.fetchedSince(since, want); got != wantDone {
			t.Fatalf("%s: fetchedSince = %v, want %v", step, got, wantDone)
		}
	}
	check("nothing fetched", false)
	h.recordFetch("b", 0, 100, before)
	h.recordFetch("b", 300, 400, before)
	check("fetched before the drain began", false)
	h.recordFetch("b", 0, 60, after)
	h.recordFetch("b", 60, 100, after)
	check("the first range in two pieces, not the second", false)
	h.recordFetch("c", 300, 400, after)
	check("another task fetched the second", false)
	h.recordFetch("b", 310, 400, after)
	check("the second range but its start", false)
	h.recordFetch("b", 250, 320, after)
	check("every range", true)

	for i := range maxFetchedRanges + 5 {
		h.recordFetch("e", assign.SliceKey(i), assign.SliceKey(i+1), after)
	}
	if rs := h.fetched["e"]; len(rs) != maxFetchedRanges || rs[0].start != 5 {
		t.Fatalf("kept %d ranges starting at %d, want the newest %d", len(rs), rs[0].start, maxFetchedRanges)
	}
}

// Fetches are recorded only while a drain runs, and forgotten when the
// last drain ends: the record of the tasks that fetched from here does not
// grow with every task that ever did.
func TestFetchedKeptOnlyWhileDraining(t *testing.T) {
	h := &handoffState{fetched: map[string][]fetchedRange{}}
	at := time.Unix(1000, 0)
	h.recordFetch("b", 0, 100, at)
	if len(h.fetched) != 0 {
		t.Fatalf("a fetch with no drain running was recorded: %v", h.fetched)
	}
	h.beginDrain()
	h.beginDrain()
	for i := range 100 {
		h.recordFetch(fmt.Sprintf("t%d", i), 0, 100, at)
	}
	h.endDrain()
	if len(h.fetched) != 100 {
		t.Fatalf("%d tasks' fetches kept while a drain still runs, want 100", len(h.fetched))
	}
	h.endDrain()
	if len(h.fetched) != 0 {
		t.Fatalf("%d tasks' fetches kept after the last drain ended, want none", len(h.fetched))
	}
}
