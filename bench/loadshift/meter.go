package loadshift

import (
	"sync"
	"time"
)

// Meter counts requests per task in one-second buckets from a start time.
// It is safe for concurrent use.
type Meter struct {
	start time.Time

	mu      sync.Mutex
	buckets []map[string]int // buckets[b][task]: answers in [start+b s, start+(b+1) s)
}

// NewMeter returns a Meter whose bucket 0 begins at start.
func NewMeter(start time.Time) *Meter { return &Meter{start: start} }

// Start is when bucket 0 begins.
func (m *Meter) Start() time.Time { return m.start }

// Bucket is the index of the bucket holding t (negative before Start).
func (m *Meter) Bucket(t time.Time) int {
	d := t.Sub(m.start)
	if d < 0 {
		return -1 - int((-d-1)/time.Second)
	}
	return int(d / time.Second)
}

// BucketStart is when bucket b begins.
func (m *Meter) BucketStart(b int) time.Time { return m.start.Add(time.Duration(b) * time.Second) }

// Add counts one request answered by task at t.
func (m *Meter) Add(task string, at time.Time) {
	b := m.Bucket(at)
	if b < 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.buckets) <= b {
		m.buckets = append(m.buckets, nil)
	}
	if m.buckets[b] == nil {
		m.buckets[b] = make(map[string]int)
	}
	m.buckets[b][task]++
}

// Counts returns the requests each of tasks answered in buckets [from, to).
func (m *Meter) Counts(from, to int, tasks []string) []int {
	out := make([]int, len(tasks))
	m.mu.Lock()
	defer m.mu.Unlock()
	for b := max(from, 0); b < to && b < len(m.buckets); b++ {
		for i, t := range tasks {
			out[i] += m.buckets[b][t]
		}
	}
	return out
}

// Imbalance is max/mean of the requests each of tasks answered in buckets
// [from, to). ok is false when they answered none.
func (m *Meter) Imbalance(from, to int, tasks []string) (imbalance float64, ok bool) {
	return Imbalance(m.Counts(from, to, tasks))
}

// Imbalance is max/mean of counts; ok is false when all are zero.
func Imbalance(counts []int) (float64, bool) {
	total, peak := 0, 0
	for _, c := range counts {
		total += c
		peak = max(peak, c)
	}
	if total == 0 {
		return 0, false
	}
	return float64(peak) * float64(len(counts)) / float64(total), true
}
