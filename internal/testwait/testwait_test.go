package testwait_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slicerd/slicerd/internal/testwait"
)

// recorder stands in for a test so that a failing wait can be observed;
// Fatalf records instead of stopping the goroutine.
type recorder struct {
	testing.TB
	failures []string
	deadline time.Time
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *recorder) Deadline() (time.Time, bool) { return r.deadline, !r.deadline.IsZero() }

func TestForReturnsWhenTheConditionHolds(t *testing.T) {
	r := &recorder{TB: t}
	calls := 0
	testwait.For(r, "the fifth call", func() bool { calls++; return calls == 5 })
	if calls != 5 || len(r.failures) != 0 {
		t.Fatalf("cond called %d times, failures %q; want 5 calls and no failure", calls, r.failures)
	}
}

func TestUntilSaysWhatItWaitedFor(t *testing.T) {
	r := &recorder{TB: t}
	calls := 0
	testwait.Until(r, 20*time.Millisecond, "the moon to turn blue", func() bool { calls++; return false })
	if len(r.failures) != 1 {
		t.Fatalf("failures %q, want one", r.failures)
	}
	if msg := r.failures[0]; !strings.HasPrefix(msg, "timed out after ") || !strings.HasSuffix(msg, " waiting for the moon to turn blue") {
		t.Errorf("failure %q does not say what was awaited", msg)
	}
	if calls < 2 {
		t.Errorf("cond called %d times before giving up, want it polled", calls)
	}
}

func TestPollStopsBeforeTheTestDeadline(t *testing.T) {
	// An hour's wait in a test whose binary times out just past the
	// margin: the wait gives up in time to report.
	r := &recorder{TB: t, deadline: time.Now().Add(2*time.Second + 20*time.Millisecond)}
	done := make(chan bool, 1)
	go func() {
		_, ok := testwait.Poll(r, time.Hour, func() bool { return false })
		done <- ok
	}()
	select {
	case ok := <-done:
		if ok {
			t.Error("Poll of a condition that never holds reported success")
		}
	case <-time.After(testwait.Timeout):
		t.Fatal("Poll waited past the test binary's deadline")
	}
}

func TestScale(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want time.Duration
	}{{"", time.Second}, {"3", 3 * time.Second}, {"0", time.Second}, {"-2", time.Second}, {"fast", time.Second}} {
		t.Setenv(testwait.ScaleEnv, tc.env)
		if got := testwait.Scale(time.Second); got != tc.want {
			t.Errorf("%s=%q: Scale(1s) = %v, want %v", testwait.ScaleEnv, tc.env, got, tc.want)
		}
	}
}
