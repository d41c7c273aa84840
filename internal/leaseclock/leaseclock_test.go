package leaseclock

import (
	"sync"
	"testing"
	"time"
)

func TestSuspendCounts(t *testing.T) {
	c := New()
	read := func(mono, wall time.Duration) time.Duration { return time.Duration(c.read(int64(mono), int64(wall))) }
	if got := read(time.Second, time.Second); got != time.Second {
		t.Fatalf("no suspend: %v, want 1s", got)
	}
	// A 10-minute suspend: the monotonic clock stood still, the wall
	// clock did not.
	if got := read(2*time.Second, 10*time.Minute+2*time.Second); got != 10*time.Minute+2*time.Second {
		t.Fatalf("after a 10-minute suspend: %v, want 10m2s", got)
	}
	// The wall clock stepped back an hour: the clock does not go back.
	if got := read(3*time.Second, 3*time.Second-time.Hour); got != 10*time.Minute+3*time.Second {
		t.Fatalf("after a backward step of the wall clock: %v, want 10m3s", got)
	}
}

// Concurrent readers that see different leads agree on the largest.
func TestLeadIsTheLargest(t *testing.T) {
	c := New()
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() { c.read(0, int64(i)) })
	}
	wg.Wait()
	if got := c.read(0, 0); got != 99 {
		t.Fatalf("lead %d after readers saw 0..99, want 99", got)
	}
}

func TestNowAdvances(t *testing.T) {
	c := New()
	a := c.Now()
	time.Sleep(time.Millisecond)
	if b := c.Now(); b <= a {
		t.Fatalf("Now went from %d to %d across a sleep", a, b)
	}
}

func BenchmarkNow(b *testing.B) {
	c := New()
	for b.Loop() {
		c.Now()
	}
}
