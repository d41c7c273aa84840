package main

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slicerd/slicerd/bench/internal/benchproc"
	"github.com/slicerd/slicerd/examples/kvcache"
)

// An open-loop load: every request has its time on a fixed timetable,
// independent of the others, and runs in its own goroutine under a
// deadline counted from that time. A client that waited for each answer
// would skip the ticks it spent blocked, and those requests — the ones a
// fault hurts — would never be counted.

// request is one scheduled request; it returns nil when satisfied.
type request func(ctx context.Context) error

// timetable is the open-loop schedule: clients × rate requests a second
// for duration, client c's k-th at (k + c/clients)/rate, each given up at
// deadline after its time; at most inflight run at once.
type timetable struct {
	clients  int
	rate     float64
	duration time.Duration
	deadline time.Duration
	inflight int
}

// Causes of an unsatisfied request.
const (
	causeBound    = "not sent: in-flight bound"
	causeDeadline = "deadline passed"
	causeNoOwner  = "no owner after the client's retries"
	causeServer   = "task answered with an error"
	causeOther    = "other error"
)

// outcome is an unsatisfied request: when it was scheduled (since the
// start) and why it was not satisfied.
type outcome struct {
	At    time.Duration `json:"at_ns"`
	Cause string        `json:"cause"`
	Err   string        `json:"err,omitempty"`
}

// loadResult is what a timetable's run gives.
type loadResult struct {
	Scheduled, Sent, Satisfied uint64
	Unsatisfied                []outcome // by scheduled time
	// Latency of each satisfied request from its scheduled time, in ms:
	// a request sent late waited for its turn, and that counts.
	Latency []float64
}

func causeOf(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return causeDeadline
	case errors.Is(err, kvcache.ErrNoOwner):
		return causeNoOwner
	case errors.Is(err, kvcache.ErrServer):
		return causeServer
	}
	return causeOther
}

// run offers the timetable from start until ctx ends or the timetable
// does, next(c) building client c's next request, and returns once every
// request sent has been answered or given up.
func (tt timetable) run(ctx context.Context, start time.Time, next func(c int) request) *loadResult {
	var (
		mu     sync.Mutex
		res    loadResult
		sent   atomic.Uint64
		ok     atomic.Uint64
		slots  = make(chan struct{}, tt.inflight)
		reqs   sync.WaitGroup
		sched  sync.WaitGroup
		period = time.Duration(float64(time.Second) / tt.rate)
	)
	fail := func(o outcome) {
		mu.Lock()
		res.Unsatisfied = append(res.Unsatisfied, o)
		mu.Unlock()
	}
	perClient := int(tt.duration.Seconds() * tt.rate)
	for c := range tt.clients {
		sched.Go(func() {
			phase := time.Duration(int64(period) * int64(c) / int64(tt.clients))
			for k := range perClient {
				at := phase + time.Duration(k)*period
				if benchproc.SleepUntil(ctx, start.Add(at)) != nil {
					return
				}
				q := next(c)
				mu.Lock()
				res.Scheduled++
				mu.Unlock()
				select {
				case slots <- struct{}{}:
				default:
					fail(outcome{At: at, Cause: causeBound})
					continue
				}
				sent.Add(1)
				reqs.Go(func() {
					defer func() { <-slots }()
					// Given up at its deadline even when the run ends
					// first: a request sent is answered or counted.
					qctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), start.Add(at+tt.deadline))
					err := q(qctx)
					cancel()
					if err != nil {
						fail(outcome{At: at, Cause: causeOf(err), Err: err.Error()})
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
	slices.SortFunc(res.Unsatisfied, func(a, b outcome) int { return int(a.At - b.At) })
	return &res
}
