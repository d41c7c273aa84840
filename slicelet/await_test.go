package slicelet

import (
	"context"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/lease"
)

// A key the newest assignment gives this task waits for the lease that
// covers it; a key it does not get, and any key once ctx ends, returns at
// once unowned.
func TestAwaitHandle(t *testing.T) {
	s := newStrongOffline(t, "a")
	a1, a2 := twoHalves(1, "a", "b"), twoHalves(2, "b", "a") // the halves swap
	mid := assign.KeySpaceEnd / 2
	incoming, leaving := keyIn(t, mid, assign.KeySpaceEnd), keyIn(t, 0, mid)
	s.install(nil, a1)
	s.setView(grant(s, lease.GuardValue(1), ownedRanges(a1, "a"), time.Hour), nil, nil)

	s.install(a1, a2) // a2 arrives; guard 2 is not set yet
	got := make(chan Handle, 1)
	go func() { got <- s.AwaitHandleString(context.Background(), incoming) }()

	// The key leaving, not the one incoming, is answered at once.
	if h := s.AwaitHandleString(context.Background(), leaving); !h.Owned() {
		t.Fatal("a key still under this task's guard is not owned")
	} else {
		h.Release()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if h := s.AwaitHandleString(ctx, incoming); h.Owned() {
		t.Fatal("an incoming key is owned before its lease")
	}
	select {
	case h := <-got:
		t.Fatalf("AwaitHandle returned (owned %v) before the lease covering the key came", h.Owned())
	default:
	}

	// The bridge from 1 to 2 covers neither key: still waiting.
	s.setView(nil, grant(s, lease.Value{From: 1, To: 2}, nil, time.Hour), ownedRanges(a1, "a"))
	select {
	case h := <-got:
		t.Fatalf("AwaitHandle returned (owned %v) under a bridge that does not cover the key", h.Owned())
	default:
	}
	s.setView(grant(s, lease.GuardValue(2), ownedRanges(a2, "a"), time.Hour), nil, nil)
	h := <-got
	if !h.Owned() || h.Token() != 2 || !h.IsAssignedContinuously() {
		t.Fatalf("after guard 2: owned %v token %d continuous %v, want owned with token 2", h.Owned(), h.Token(), h.IsAssignedContinuously())
	}
	h.Release()
	// Now the formerly owned key is another's: no wait.
	if h := s.AwaitHandleString(context.Background(), leaving); h.Owned() {
		t.Fatal("a key given away is owned")
	}
}

// A newer assignment that gives the key elsewhere ends the wait unowned.
func TestAwaitHandleKeyGoesElsewhere(t *testing.T) {
	s := newStrongOffline(t, "a")
	a1 := twoHalves(1, "b", "a")
	mid := assign.KeySpaceEnd / 2
	k := keyIn(t, 0, mid) // b's in a1; a's in a2; b's again in a3
	s.install(nil, a1)
	a2 := twoHalves(2, "a", "b")
	s.install(a1, a2)
	got := make(chan Handle, 1)
	go func() { got <- s.AwaitHandleString(context.Background(), k) }()
	a3 := twoHalves(3, "b", "a")
	s.install(a2, a3)
	if h := <-got; h.Owned() {
		t.Fatal("the key is owned though the newest assignment gives it to another task")
	}
}

// In affinity mode AwaitHandle is Handle.
func TestAwaitHandleAffinity(t *testing.T) {
	s, err := New(Config{Job: "j", Task: "a", Addr: "127.0.0.1:9000", Join: []string{"127.0.0.1:7946"}})
	if err != nil {
		t.Fatal(err)
	}
	a := twoHalves(1, "a", "b")
	s.install(nil, a)
	mine, theirs := keyIn(t, 0, assign.KeySpaceEnd/2), keyIn(t, assign.KeySpaceEnd/2, assign.KeySpaceEnd)
	if !s.AwaitHandleString(context.Background(), mine).Owned() || s.AwaitHandleString(context.Background(), theirs).Owned() {
		t.Fatal("affinity-mode AwaitHandle does not follow the assignment")
	}
}

// BenchmarkAwaitHandle: AwaitHandle on owned keys, the common case, where
// it is Handle.
func BenchmarkAwaitHandle(b *testing.B) {
	s, keys := benchStrong(b)
	ctx := context.Background()
	benchLookups(b, keys, func(key []byte) bool {
		h := s.AwaitHandle(ctx, key)
		ok := h.IsAssignedContinuously()
		h.Release()
		return ok
	})
}
