package roles

import (
	"errors"
	"strings"
	"testing"
	"time"
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

func TestConfigValidateConnectionLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"zero max connections", func(c *Config) { c.MaxConnections = 0 }, "max connections is 0"},
		{"negative per-IP cap", func(c *Config) { c.MaxConnectionsPerIP = -1 }, "max connections per IP is -1"},
		{"per-IP cap above the total", func(c *Config) { c.MaxConnections, c.MaxConnectionsPerIP = 10, 11 }, "at most max connections (10)"},
		{"zero idle timeout", func(c *Config) { c.IdleTimeout = 0 }, "idle timeout is 0s"},
		{"negative read header timeout", func(c *Config) { c.ReadHeaderTimeout = -time.Second }, "read header timeout is -1s"},
		{"zero ping interval", func(c *Config) { c.PingInterval = 0 }, "ping interval is 0s"},
		{"zero ping timeout", func(c *Config) { c.PingTimeout = 0 }, "ping timeout is 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := TestConfig("n1")
			cfg.DataDir = t.TempDir()
			tc.change(&cfg)
			err := cfg.Validate()
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want ErrConfig saying %q", err, tc.want)
			}
		})
	}
	cfg := TestConfig("n1")
	cfg.DataDir = t.TempDir()
	cfg.MaxConnections, cfg.MaxConnectionsPerIP = 1, 1
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate with caps of 1: %v", err)
	}
}
