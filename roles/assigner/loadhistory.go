package assigner

import (
	"context"
	"sync"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/roles/rpc"
)

// The Assigner keeps a short record of each job's load over the key space,
// for the heatmap operators look at (JobService.GetLoadHistory): every
// LoadHistoryInterval, for each job whose tasks report load to it (they
// report to every Assigner, whichever holds the job's lease), it bins the
// job's load (its tasks' latest reports, as merged for decisions) into
// loadBuckets equal key ranges and keeps the newest loadSamples samples.
//
// Memory: a job's record is loadSamples × (8 + loadBuckets × 4) bytes,
// 31,680 bytes (about 31 KiB), allocated at its first sample; at most
// maxLoadHistoryJobs jobs are recorded (about 31 MiB), a job beyond them
// is not. A record is dropped with its job, and when the job has not been
// sampled for as long as a record spans (its tasks stopped reporting).
const (
	loadBuckets        = 64
	loadSamples        = 120 // ten minutes at the default sampling interval, 5 s
	maxLoadHistoryJobs = 1024
)

// loadRing is one job's record: a ring of the newest loadSamples samples.
type loadRing struct {
	times [loadSamples]int64 // unix nanoseconds
	loads [loadSamples][loadBuckets]float32
	next  int // where the next sample goes
	n     int // samples held
}

// loadHistory holds the records of every job an Assigner samples.
type loadHistory struct {
	interval time.Duration // 0: nothing is recorded

	mu   sync.Mutex
	jobs map[string]*loadRing
	// refused: jobs not recorded because jobs is full, warned about once.
	refused map[string]bool
}

func newLoadHistory(interval time.Duration) *loadHistory {
	return &loadHistory{interval: interval, jobs: make(map[string]*loadRing)}
}

// add records a sample of job's load taken at now; buckets holds
// loadBuckets values, or is nil for a job takes refused (nothing is
// recorded: room made since is taken at the next sample). A job over
// maxLoadHistoryJobs is not recorded, and add reports false (once per job
// and full spell: the job is marked).
func (h *loadHistory) add(job string, now time.Time, buckets []float64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.jobs[job]
	if r == nil && buckets == nil && len(h.jobs) < maxLoadHistoryJobs {
		return true
	}
	if r == nil {
		if len(h.jobs) >= maxLoadHistoryJobs {
			if h.refused == nil {
				h.refused = make(map[string]bool)
			}
			first := !h.refused[job]
			h.refused[job] = true
			return !first
		}
		delete(h.refused, job)
		r = new(loadRing)
		h.jobs[job] = r
	}
	if buckets == nil {
		return true // sampled as refused, recorded meanwhile: the next sample is
	}
	r.times[r.next] = now.UnixNano()
	for i, v := range buckets[:loadBuckets] {
		r.loads[r.next][i] = float32(v)
	}
	r.next = (r.next + 1) % loadSamples
	r.n = min(r.n+1, loadSamples)
	return true
}

// prune drops the records whose newest sample is older than a record
// spans at now.
func (h *loadHistory) prune(now time.Time) {
	span := h.interval * loadSamples
	h.mu.Lock()
	defer h.mu.Unlock()
	for job, r := range h.jobs {
		newest := r.times[(r.next+loadSamples-1)%loadSamples]
		if now.Sub(time.Unix(0, newest)) > span {
			delete(h.jobs, job)
		}
	}
}

// forget drops a job's record.
func (h *loadHistory) forget(job string) {
	h.mu.Lock()
	delete(h.jobs, job)
	h.mu.Unlock()
}

// samples copies a job's record, oldest first.
func (h *loadHistory) samples(job string) []*slicerv1.LoadSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.jobs[job]
	if r == nil {
		return nil
	}
	out := make([]*slicerv1.LoadSample, r.n)
	for k := range r.n {
		i := (r.next - r.n + k + loadSamples) % loadSamples
		s := &slicerv1.LoadSample{TimeUnixNano: r.times[i], BucketLoad: make([]float64, loadBuckets)}
		for b, v := range r.loads[i] {
			s.BucketLoad[b] = float64(v)
		}
		out[k] = s
	}
	return out
}

// sampleLoads takes one sample of every job this Assigner has load
// reports for, whether or not it holds the job's lease: Slicelets send
// their reports to every Assigner (ReportLoadRequest.every_assigner), so
// each records the same history, and it outlives a lease move. Records no
// longer sampled are dropped. The Assigner's Run loop calls it every
// LoadHistoryInterval.
func (a *Assigner) sampleLoads(now time.Time) {
	for _, name := range a.loads.reportingJobs() {
		var buckets []float64
		if a.loadHistory.takes(name) {
			buckets = a.jobBuckets(name)
		}
		if !a.loadHistory.add(name, now, buckets) {
			a.log.Warn("load history full: not recording another job's load for the web UI's heatmap", "job", name, "max_jobs", maxLoadHistoryJobs)
		}
	}
	a.loadHistory.prune(now)
}

// jobBuckets is the job's load (jobLoad) in loadBuckets equal key ranges,
// added up from its tasks' reports without merging them: at 10,000 tasks
// the merge alone costs some 90 ms, the buckets of the reports a few.
func (a *Assigner) jobBuckets(job string) []float64 {
	out := make([]float64, loadBuckets)
	a.liveReports(job, func(rate assign.Load, w float64) { rate.AddBuckets(out, w) })
	return out
}

// takes reports whether add would record a sample of job: it is recorded
// already or there is room for it. Sampling a job costs its reports a
// pass: one the history would refuse is not sampled.
func (h *loadHistory) takes(job string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.jobs[job] != nil || len(h.jobs) < maxLoadHistoryJobs
}

// GetLoadHistory implements slicerv1connect.JobServiceHandler.
func (a *Assigner) GetLoadHistory(ctx context.Context, req *connect.Request[slicerv1.GetLoadHistoryRequest]) (*connect.Response[slicerv1.GetLoadHistoryResponse], error) {
	name := req.Msg.GetJob()
	if _, err := a.peek(ctx, name); err != nil {
		return nil, rpc.ToConnect(err)
	}
	return connect.NewResponse(&slicerv1.GetLoadHistoryResponse{
		BucketCount: loadBuckets,
		IntervalMs:  uint32(a.loadHistory.interval.Milliseconds()),
		Samples:     a.loadHistory.samples(name),
	}), nil
}
