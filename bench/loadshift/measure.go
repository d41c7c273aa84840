package loadshift

import (
	"context"
	"fmt"
	"time"

	"github.com/slicerd/slicerd/bench/internal/benchproc"
)

// Measure configures the observation of one shift.
type Measure struct {
	// Period is how long to observe after the shift. Zero: until balanced.
	Period time.Duration
	// Window is the trailing window of imbalance, in one-second buckets.
	Window int
	// Threshold is the imbalance under which the tasks count as balanced.
	Threshold float64
	// StopWhenBalanced ends the observation at the first balanced window
	// instead of at the end of Period.
	StopWhenBalanced bool
	// OnSample, when set, is called once a second with the trailing
	// window's imbalance.
	OnSample func(Sample)
}

// DefaultMeasure is the paper's threshold, 1.2, over a 5 s window.
func DefaultMeasure() Measure { return Measure{Period: time.Minute, Window: 5, Threshold: 1.2} }

// Sample is the imbalance of the window that ends Seconds after the shift.
type Sample struct {
	Seconds    int     `json:"t_s"`
	Imbalance  float64 `json:"imbalance"`
	Generation uint64  `json:"generation"`
	Tasks      int     `json:"tasks"`
	// Expected is the imbalance the assignment of the moment would give
	// with each replica taking an equal share (Driver.ExpectedImbalance).
	Expected float64 `json:"expected"`
	// HotReplicas is how many tasks serve each of the three hottest keys.
	HotReplicas []int `json:"hot_replicas"`
}

// ShiftResult is what one shift's observation found.
type ShiftResult struct {
	Shift  int    `json:"shift"`
	HotKey string `json:"hot_key"`
	// Balanced tells whether a whole window after the shift had an
	// imbalance under the threshold; ReactionSeconds is then when that
	// window ended, counted from the shift, so it is never below the
	// window's length.
	Balanced        bool    `json:"balanced"`
	ReactionSeconds float64 `json:"reaction_s,omitempty"`
	// FirstImbalance is that of the first window wholly after the shift,
	// PeakImbalance the highest of any, FinalImbalance the last.
	FirstImbalance   float64 `json:"first_imbalance"`
	PeakImbalance    float64 `json:"peak_imbalance"`
	FinalImbalance   float64 `json:"final_imbalance"`
	GenerationBefore uint64  `json:"generation_before"`
	GenerationAfter  uint64  `json:"generation_after"`
}

// bucketSlack lets the requests that were in flight at a bucket's end be
// counted before the bucket is read.
const bucketSlack = 100 * time.Millisecond

// MeasureShift shifts the hot keys at the next bucket boundary and watches
// the trailing window's imbalance until m.Period has passed (or the tasks
// are balanced, with m.StopWhenBalanced). Run must be offering load.
func (d *Driver) MeasureShift(ctx context.Context, m Measure) (ShiftResult, error) {
	if m.Window < 1 || !(m.Threshold >= 1) || m.Period < 0 || (m.Period == 0 && !m.StopWhenBalanced) {
		return ShiftResult{}, fmt.Errorf("loadshift: measure window %d s, threshold %g, period %v; use a window of at least 1 s, a threshold of at least 1 and a positive period (or StopWhenBalanced)",
			m.Window, m.Threshold, m.Period)
	}
	b0 := d.meter.Bucket(time.Now()) + 1
	if err := benchproc.SleepUntil(ctx, d.meter.BucketStart(b0)); err != nil {
		return ShiftResult{}, err
	}
	r := ShiftResult{GenerationBefore: d.ck.Generation()}
	d.Shift()
	d.mu.Lock()
	r.Shift = d.shift
	d.mu.Unlock()
	r.HotKey = d.HotKey()
	last := int(m.Period / time.Second)
	for k := m.Window; m.Period == 0 || k <= last; k++ {
		if err := benchproc.SleepUntil(ctx, d.meter.BucketStart(b0+k).Add(bucketSlack)); err != nil {
			return r, err
		}
		tasks := d.Tasks()
		x, ok := d.meter.Imbalance(b0+k-m.Window, b0+k, tasks)
		if !ok {
			continue // nothing answered: not balanced, nothing to say
		}
		if r.FirstImbalance == 0 {
			r.FirstImbalance = x
		}
		r.PeakImbalance = max(r.PeakImbalance, x)
		r.FinalImbalance = x
		r.GenerationAfter = d.ck.Generation()
		if m.OnSample != nil {
			e, _ := d.ExpectedImbalance()
			m.OnSample(Sample{Seconds: k, Imbalance: x, Generation: r.GenerationAfter, Tasks: len(tasks), Expected: e, HotReplicas: d.Replicas(3)})
		}
		if !r.Balanced && x < m.Threshold {
			r.Balanced, r.ReactionSeconds = true, float64(k)
			if m.StopWhenBalanced {
				break
			}
		}
	}
	return r, nil
}

// WaitBalanced returns once a whole window of m.Window seconds had an
// imbalance under m.Threshold, or with an error when ctx ends first.
func (d *Driver) WaitBalanced(ctx context.Context, m Measure) error {
	b := d.meter.Bucket(time.Now()) + 1
	for k := b + m.Window; ; k++ {
		if err := benchproc.SleepUntil(ctx, d.meter.BucketStart(k).Add(bucketSlack)); err != nil {
			return err
		}
		x, ok := d.meter.Imbalance(k-m.Window, k, d.Tasks())
		if m.OnSample != nil && ok {
			e, _ := d.ExpectedImbalance()
			m.OnSample(Sample{Seconds: k - b, Imbalance: x, Generation: d.ck.Generation(), Tasks: len(d.Tasks()), Expected: e, HotReplicas: d.Replicas(3)})
		}
		if ok && x < m.Threshold {
			return nil
		}
	}
}
