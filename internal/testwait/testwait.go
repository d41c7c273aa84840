// Package testwait polls a condition in tests until it holds, failing the
// test with what it was waiting for when a deadline passes. The deadline
// only keeps a broken test from hanging: a passing test returns as soon as
// its condition holds, and no test asserts how long a wait took.
//
// Deadlines are generous because the race detector on a small shared
// machine slows gossip and storage a lot. SLICERD_TEST_TIMEOUT_SCALE (a
// positive integer) multiplies every deadline on slower machines, and a
// wait never outlives the test binary's own -timeout: it fails first, so
// the failure names the condition instead of dumping goroutines.
package testwait

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Timeout is how long For waits, before scaling.
const Timeout = 30 * time.Second

// ScaleEnv names the environment variable that multiplies every deadline.
const ScaleEnv = "SLICERD_TEST_TIMEOUT_SCALE"

// Polling starts every minInterval and backs off to maxInterval: a
// condition that holds soon is seen soon, and a long wait does not keep a
// core busy.
const (
	minInterval = time.Millisecond
	maxInterval = 20 * time.Millisecond
)

// margin is kept before the test binary's deadline so that the failure
// can still be reported.
const margin = 2 * time.Second

// For polls cond until it holds, failing t after Timeout (scaled) with
// "timed out after … waiting for <what>".
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Until(t, Timeout, what, cond)
}

// Until polls cond until it holds and returns how long that took, failing
// t after timeout (scaled) with what it was waiting for.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	waited, ok := Poll(t, timeout, cond)
	if !ok {
		t.Fatalf("timed out after %v waiting for %s", waited.Round(time.Millisecond), what)
	}
	return waited
}

// Poll polls cond until it holds or timeout (scaled) passes, and returns
// how long it waited and whether cond held. Use it when the failure
// message needs state read at the time of the failure; otherwise Until.
func Poll(t testing.TB, timeout time.Duration, cond func() bool) (time.Duration, bool) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(Scale(timeout))
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, ok := d.Deadline(); ok && end.Add(-margin).Before(deadline) {
			deadline = end.Add(-margin)
		}
	}
	interval := minInterval
	for !cond() {
		if !time.Now().Before(deadline) {
			return time.Since(start), false
		}
		time.Sleep(interval)
		interval = min(2*interval, maxInterval)
	}
	return time.Since(start), true
}

// Scale multiplies d by SLICERD_TEST_TIMEOUT_SCALE when that is set to a
// positive integer.
func Scale(d time.Duration) time.Duration {
	if n, err := strconv.Atoi(os.Getenv(ScaleEnv)); err == nil && n > 0 {
		return d * time.Duration(n)
	}
	return d
}
