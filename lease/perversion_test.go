package lease

import (
	"sync"
	"testing"
)

// A value is built once per version; a caller that read an older version
// gets the newer value kept; callers at once share one build.
func TestPerVersion(t *testing.T) {
	var c PerVersion[int]
	builds := 0
	build := func(v int) func() int { return func() int { builds++; return v } }
	if got := c.Get(1, build(10)); got != 10 || builds != 1 {
		t.Fatalf("first Get = %d after %d builds, want 10 after 1", got, builds)
	}
	if got := c.Get(1, build(11)); got != 10 || builds != 1 {
		t.Fatalf("Get at the same version = %d after %d builds, want the kept 10 and no build", got, builds)
	}
	if got := c.Get(0, build(9)); got != 10 || builds != 1 {
		t.Fatalf("Get at an older version = %d after %d builds, want the newer kept 10 and no build", got, builds)
	}
	if got := c.Get(2, build(20)); got != 20 || builds != 2 {
		t.Fatalf("Get at a new version = %d after %d builds, want 20 after 2", got, builds)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { c.Get(3, build(30)) }) // builds is guarded by c's lock
	}
	wg.Wait()
	if builds != 3 {
		t.Errorf("8 callers at a new version built %d times, want once", builds-2)
	}
}
