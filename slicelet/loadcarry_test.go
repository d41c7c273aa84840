package slicelet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
)

// A task serving a steady 100 requests a second whose reports fail for a
// few windows (no Assigner reachable, or none accepting: reportOnce keeps
// the window's load for the next report) reports its real rate once one
// gets through: the load carried over is decayed at each failure
// (pendingDecay), and so is the time it was measured over. Divided by the
// whole time since the last report that got through, the decayed load
// made the task look nearly idle (38.7/s after four failures), and the
// Assigner moved load onto it for nothing.
func TestRateAfterFailedReports(t *testing.T) {
	const (
		perSecond = 100.0
		window    = 2 * time.Second
	)
	a := allOn(1, "a", map[string]string{"a": "127.0.0.1:9000"})
	for _, failed := range []int{1, 4, 9} {
		t.Run(fmt.Sprintf("%d failed", failed), func(t *testing.T) {
			s := newOffline(t, "a")
			s.install(nil, a)
			keys := testKeys(50)
			serve := func() { // one window's requests
				for i := range int(perSecond * window.Seconds()) {
					s.ReportLoadString(keys[i%len(keys)], 1)
				}
			}
			t0 := time.Now()
			s.load.start = t0
			for i := 1; i <= failed; i++ {
				serve()
				// Not joined yet: reportOnce keeps the window, as it does
				// when no Assigner is live or none accepted it.
				s.reportOnce(context.Background(), t0.Add(time.Duration(i)*window))
			}
			serve()
			r := s.collect(t0.Add(time.Duration(failed+1) * window))
			req := r.proto("j", "a")
			var sum float64
			for _, sl := range req.GetSlices() {
				sum += sl.GetLoad()
			}
			rate := sum / req.GetWindowSeconds()
			t.Logf("after %d failed reports: window %.0f s, load %.0f, rate %.1f/s (true %.0f/s), events %d",
				failed, req.GetWindowSeconds(), sum, rate, perSecond, req.GetEvents())
			if rate < 0.8*perSecond || rate > 1.2*perSecond {
				t.Errorf("after %d failed reports the task reports %.1f requests/s; it served %.0f/s throughout", failed, rate, perSecond)
			}
		})
	}
	_ = assign.KeySpaceEnd
}
