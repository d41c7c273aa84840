package benchproc

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// The timetable is open-loop: requests that block until their deadline
// skip no tick, and a request the in-flight bound stops is counted as
// unsatisfied, not dropped.
func TestTimetableOpenLoop(t *testing.T) {
	tt := Timetable{Clients: 3, Rate: 200, Duration: 100 * time.Millisecond, Deadline: 50 * time.Millisecond, Inflight: 4}
	var n atomic.Int64
	res := tt.Run(context.Background(), time.Now(), func(c int) Request {
		if n.Add(1)%2 == 0 {
			return func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() } // never answered
		}
		return func(context.Context) error { return nil }
	})
	if want := uint64(3 * 20); res.Scheduled != want {
		t.Errorf("scheduled %d, want %d", res.Scheduled, want)
	}
	bound, deadline := 0, 0
	for _, o := range res.Unsatisfied {
		switch o.Cause {
		case CauseBound:
			bound++
		case CauseDeadline:
			deadline++
		default:
			t.Errorf("unexpected cause %q", o.Cause)
		}
	}
	if bound == 0 || res.Sent+uint64(bound) != res.Scheduled {
		t.Errorf("sent %d + refused by the bound %d, want %d scheduled and some refused", res.Sent, bound, res.Scheduled)
	}
	if res.Satisfied+uint64(len(res.Unsatisfied)) != res.Scheduled || uint64(deadline)+res.Satisfied != res.Sent {
		t.Errorf("satisfied %d, unsatisfied %d (%d by deadline), sent %d, scheduled %d", res.Satisfied, len(res.Unsatisfied), deadline, res.Sent, res.Scheduled)
	}
}
