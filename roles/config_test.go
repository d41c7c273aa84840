package roles

import (
	"errors"
	"strings"
	"testing"
)

// With several bad durations, Validate names the same one every time: the
// first in the documented order.
func TestConfigValidateDurationsDeterministic(t *testing.T) {
	cfg := TestConfig("n1")
	cfg.DataDir = t.TempDir()
	cfg.JoinRetryInterval, cfg.LeaveTimeout, cfg.ShutdownTimeout, cfg.PullMinBackoff = 0, 0, -1, 0
	for range 50 {
		err := cfg.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "join retry interval is 0s") {
			t.Fatalf("Validate = %v, want the join retry interval named first", err)
		}
	}
}
