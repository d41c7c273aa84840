package benchproc

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slicerd/slicerd/examples/kvcache"
)

// An open-loop load: every request has its time on a fixed timetable,
// independent of the others, and runs in its own goroutine under a
// deadline counted from that time. A client that waited for each answer
// would skip the ticks it spent blocked, and those requests — the ones a
// fault hurts — would never be counted.

// Request is one scheduled request; it returns nil when satisfied.
type Request func(ctx context.Context) error

// Timetable is the open-loop schedule: clients × rate requests a second
// for duration, client c's k-th at (k + c/clients)/rate, each given up at
// deadline after its time; at most inflight run at once.
type Timetable struct {
	Clients  int
	Rate     float64
	Duration time.Duration
	Deadline time.Duration
	Inflight int
}

// Causes of an unsatisfied request.
const (
	CauseBound    = "not sent: in-flight bound"
	CauseDeadline = "deadline passed"
	CauseNoOwner  = "no owner after the client's retries"
	CauseServer   = "task answered with an error"
	CauseOther    = "other error"
)

// Outcome is an unsatisfied request: when it was scheduled (since the
// start) and why it was not satisfied.
type Outcome struct {
	At    time.Duration `json:"at_ns"`
	Cause string        `json:"cause"`
	Err   string        `json:"err,omitempty"`
}

// LoadResult is what a Timetable's run gives.
type LoadResult struct {
	Scheduled, Sent, Satisfied uint64
	// ScheduledAt is the time of every scheduled request, in order per
	// client, for a harness that counts the requests inside a window.
	ScheduledAt []time.Duration
	Unsatisfied []Outcome // by scheduled time
	// Latency of each satisfied request from its scheduled time, in ms:
	// a request sent late waited for its turn, and that counts.
	Latency []float64
}

// CauseOf names what made a request unsatisfied.
func CauseOf(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return CauseDeadline
	case errors.Is(err, kvcache.ErrNoOwner):
		return CauseNoOwner
	case errors.Is(err, kvcache.ErrServer):
		return CauseServer
	}
	return CauseOther
}

// Run offers the timetable from start until ctx ends or the timetable
// does, next(c) building client c's next request, and returns once every
// request sent has been answered or given up.
func (tt Timetable) Run(ctx context.Context, start time.Time, next func(c int) Request) *LoadResult {
	var (
		mu     sync.Mutex
		res    LoadResult
		sent   atomic.Uint64
		ok     atomic.Uint64
		slots  = make(chan struct{}, tt.Inflight)
		reqs   sync.WaitGroup
		sched  sync.WaitGroup
		period = time.Duration(float64(time.Second) / tt.Rate)
	)
	fail := func(o Outcome) {
		mu.Lock()
		res.Unsatisfied = append(res.Unsatisfied, o)
		mu.Unlock()
	}
	perClient := int(tt.Duration.Seconds() * tt.Rate)
	for c := range tt.Clients {
		sched.Go(func() {
			phase := time.Duration(int64(period) * int64(c) / int64(tt.Clients))
			for k := range perClient {
				at := phase + time.Duration(k)*period
				if SleepUntil(ctx, start.Add(at)) != nil {
					return
				}
				q := next(c)
				mu.Lock()
				res.Scheduled++
				res.ScheduledAt = append(res.ScheduledAt, at)
				mu.Unlock()
				select {
				case slots <- struct{}{}:
				default:
					fail(Outcome{At: at, Cause: CauseBound})
					continue
				}
				sent.Add(1)
				reqs.Go(func() {
					defer func() { <-slots }()
					// Given up at its deadline even when the run ends
					// first: a request sent is answered or counted.
					qctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), start.Add(at+tt.Deadline))
					err := q(qctx)
					cancel()
					if err != nil {
						fail(Outcome{At: at, Cause: CauseOf(err), Err: err.Error()})
						return
					}
					ok.Add(1)
					ms := float64(time.Since(start.Add(at)).Microseconds()) / 1e3
					mu.Lock()
					res.Latency = append(res.Latency, ms)
					mu.Unlock()
				})
			}
		})
	}
	sched.Wait()
	reqs.Wait()
	res.Sent, res.Satisfied = sent.Load(), ok.Load()
	slices.SortFunc(res.Unsatisfied, func(a, b Outcome) int { return int(a.At - b.At) })
	return &res
}
