package assigner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/storage"
)

// reportLimiter paces each task's load reports with a token bucket:
// rate per second, burst in a row. Buckets of tasks that have stopped
// reporting are dropped once full again, so memory follows the tasks
// that report.
type reportLimiter struct {
	rate    rate.Limit
	burst   int
	refused atomic.Uint64 // reports refused since the start

	mu        sync.Mutex
	tasks     map[[2]string]*rate.Limiter // job, task → bucket
	sweepSize int                         // sweep when the map grows past this
}

func newReportLimiter(perSecond float64, burst int) *reportLimiter {
	return &reportLimiter{rate: rate.Limit(perSecond), burst: burst, tasks: make(map[[2]string]*rate.Limiter), sweepSize: 1024}
}

// allow takes a token from the task's bucket; when there is none it
// returns false and how long until there is.
func (r *reportLimiter) allow(job, task string, now time.Time) (bool, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := [2]string{job, task}
	l := r.tasks[key]
	if l == nil {
		if len(r.tasks) >= r.sweepSize {
			r.sweep(now)
		}
		l = rate.NewLimiter(r.rate, r.burst)
		r.tasks[key] = l
	}
	res := l.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		r.refused.Add(1)
		return false, d
	}
	return true, 0
}

// sweep drops the buckets that are full, which are as good as new, and
// sets the next sweep at twice the buckets left.
func (r *reportLimiter) sweep(now time.Time) {
	for k, l := range r.tasks {
		if l.TokensAt(now) >= float64(r.burst) {
			delete(r.tasks, k)
		}
	}
	r.sweepSize = max(1024, 2*len(r.tasks))
}

// limitReport refuses a report beyond the task's rate in r, telling the
// task when to send the next one. Load and readiness reports are paced
// by buckets of their own (same size), so a burst of one kind does not
// refuse the other.
func limitReport(r *reportLimiter, kind, job, task string) error {
	ok, wait := r.allow(job, task, time.Now())
	if ok {
		return nil
	}
	return fmt.Errorf("%w: task %q of job %q sends more than %g %s reports per second (burst %d; --max-load-reports-per-second, --load-report-burst); "+
		"retry in %v", rpc.ErrTooManyReports, task, job, float64(r.rate), kind, r.burst, wait.Round(time.Millisecond))
}

// capSlices applies the agent's --max-slices-per-job to a job's
// configuration: the lower of it and the job's own MaxSlices.
func (a *Assigner) capSlices(cfg assign.Config) assign.Config {
	if cfg.MaxSlices == 0 || cfg.MaxSlices > a.maxSlices {
		cfg.MaxSlices = a.maxSlices
	}
	return cfg
}

// checkMaxSlices refuses a job configuration whose own slice cap is
// above this Assigner's --max-slices-per-job, which would cap it anyway.
func (a *Assigner) checkMaxSlices(cfg assign.Config) error {
	if cfg.MaxSlices <= a.maxSlices {
		return nil
	}
	return fmt.Errorf("%w: max slices %d is above this assigner's --max-slices-per-job %d; "+
		"set at most %d, or 0 for the assigner's cap", assign.ErrInvalidConfig, cfg.MaxSlices, a.maxSlices, a.maxSlices)
}

// checkReportSize refuses a load report with more entries than a job may
// have slices, before it is decoded further.
func (a *Assigner) checkReportSize(job, task string, entries int) error {
	if entries <= a.maxSlices {
		return nil
	}
	return fmt.Errorf("%w: the report of task %q of job %q has %d slices; a job has at most %d (--max-slices-per-job); "+
		"report the load of the slices the task is assigned", assign.ErrInvalidLoad, task, job, entries, a.maxSlices)
}

// tooManyJobs is the error for a new job over MaxJobs.
func (a *Assigner) tooManyJobs(job string) error {
	return fmt.Errorf("%w: this assigner already holds %d jobs (--max-jobs), so job %q is not added; "+
		"raise --max-jobs on every assigner, or reuse an existing job", rpc.ErrTooManyJobs, a.maxJobs, job)
}

// admitNew checks, before a new job's configuration is stored, that the
// Assigner may hold one more job. A job it holds already or one the store
// holds (another Assigner took it) is always admitted.
func (a *Assigner) admitNew(ctx context.Context, job string) error {
	if _, ok := a.known(job); ok {
		return nil
	}
	a.mu.Lock()
	full := len(a.jobs) >= a.maxJobs
	a.mu.Unlock()
	if !full {
		return nil
	}
	_, err := storage.LoadCurrent(ctx, a.store, job)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, storage.ErrNotFound):
		return a.tooManyJobs(job)
	default:
		return fmt.Errorf("assigner: load job %q: %w", job, err)
	}
}

// logIgnoredJobs logs, at most once per Config.RefusalLogInterval, the jobs that
// tasks announce in gossip but the Assigner does not take on because it
// holds MaxJobs jobs already.
func (a *Assigner) logIgnoredJobs(ignored []string) {
	if len(ignored) == 0 {
		return
	}
	now := time.Now()
	a.ignoredLog.Lock()
	if !a.ignoredLog.last.IsZero() && now.Sub(a.ignoredLog.last) < a.refusalLog {
		a.ignoredLog.Unlock()
		return
	}
	a.ignoredLog.last = now
	a.ignoredLog.Unlock()
	a.log.Warn("ignoring jobs announced by tasks: the assigner holds --max-jobs jobs already; raise --max-jobs to serve them",
		"max_jobs", a.maxJobs, "ignored", len(ignored), "first", ignored[0])
}

// withinJobCap keeps, of sorted job names, those the Assigner holds and,
// in name order, as many new ones as MaxJobs leaves room for (held is
// how many it holds); the others are logged and left out.
func (a *Assigner) withinJobCap(sorted []string, held int) []string {
	room := a.maxJobs - held
	if len(sorted)-held <= room {
		return sorted
	}
	kept := sorted[:0:0]
	var ignored []string
	for _, name := range sorted {
		if _, ok := a.known(name); ok || room > 0 {
			if !ok {
				room--
			}
			kept = append(kept, name)
			continue
		}
		ignored = append(ignored, name)
	}
	a.logIgnoredJobs(ignored)
	return kept
}
