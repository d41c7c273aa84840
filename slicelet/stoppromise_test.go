package slicelet

import (
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/lease"
)

// A Slicelet that is stopping (keepPromises, then releaseLeases) gives
// its leases up only once every HeldFor it promised has passed, also a
// promise the application was given while the stop waited for earlier
// ones: handles taken during the stop get no promise, and the latest one
// is read again after each wait. Given up earlier, the key could have
// another owner while a request still held it within its promise.
func TestStopKeepsPromisesMadeDuringTheStop(t *testing.T) {
	s := newStrongOffline(t, "a")
	s.cfg.ReleaseWait = 300 * time.Millisecond
	a1 := twoHalves(1, "a", "b")
	s.install(nil, a1)
	g1 := grant(s, lease.GuardValue(1), ownedRanges(a1, "a"), time.Hour)
	s.setView(g1, nil, nil)
	mine := keyIn(t, 0, assign.KeySpaceEnd/2)

	h1 := s.HandleString(mine)
	if h1.HeldFor() <= 0 {
		t.Fatal("no promise for h1")
	}
	stopped := background(func() {
		s.keepPromises()
		s.releaseLeases() // what strongLoop does next: the leases go
	})
	time.Sleep(150 * time.Millisecond)
	// The application still serves while Run stops: a new request.
	h2 := s.HandleString(mine)
	t2 := s.since()
	d2 := h2.HeldFor()
	if d2 <= 0 {
		t.Logf("no promise for a handle taken during the stop: fine")
		h2.Release()
		h1.Release()
		<-stopped
		return
	}
	h1.Release()
	<-stopped
	now := s.since()
	t.Logf("h2 promised HeldFor %v at +%v; the leases were given up %v into that promise",
		d2, time.Duration(0), time.Duration(now-t2))
	if now < t2+int64(d2) {
		t.Errorf("the Slicelet gave its leases up %v before the HeldFor %v it promised for a handle still held had passed (continuous now: %v)",
			time.Duration(t2+int64(d2)-now), d2, h2.IsAssignedContinuously())
	}
	h2.Release()
}
