package roles

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slicerd/slicerd/gossip"
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
		{"zero max connections", func(c *Config) { c.MaxConnections = 0 }, "max connections (--max-connections) is 0"},
		{"negative per-IP cap", func(c *Config) { c.MaxConnectionsPerIP = -1 }, "max connections per IP (--max-connections-per-ip) is -1"},
		{"per-IP cap above the total", func(c *Config) { c.MaxConnections, c.MaxConnectionsPerIP = 10, 11 }, "at most max connections (10)"},
		{"zero idle timeout", func(c *Config) { c.IdleTimeout = 0 }, "idle timeout (--idle-timeout) is 0s"},
		{"negative read header timeout", func(c *Config) { c.ReadHeaderTimeout = -time.Second }, "read header timeout (--read-header-timeout) is -1s"},
		{"zero ping interval", func(c *Config) { c.PingInterval = 0 }, "ping interval (--ping-interval) is 0s"},
		{"zero ping timeout", func(c *Config) { c.PingTimeout = 0 }, "ping timeout (--ping-timeout) is 0s"},
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

func TestConfigValidateDistributorUpstreams(t *testing.T) {
	many := make([]string, MaxDistributorUpstreams+1)
	for i := range many {
		many[i] = "10.0.0.1:" + strconv.Itoa(7000+i)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"without the distributor role", func(c *Config) {
			c.Roles, c.DistributorUpstreams = []gossip.Role{gossip.RoleAssigner}, []string{"10.0.0.1:7000"}
		}, "need the distributor role"},
		{"not host:port", func(c *Config) { c.DistributorUpstreams = []string{"10.0.0.1"} }, "upstream distributor address"},
		{"twice", func(c *Config) { c.DistributorUpstreams = []string{"10.0.0.1:7000", "10.0.0.1:7000"} }, "listed twice"},
		{"too many", func(c *Config) { c.DistributorUpstreams = many }, "at most 16"},
		{"itself", func(c *Config) {
			c.RPCAddr = "10.0.0.9:7000"
			c.DistributorUpstreams = []string{"10.0.0.9:7000"}
		}, "own RPC address"},
		{"itself, advertised", func(c *Config) {
			c.AdvertiseRPCAddr = "10.0.0.9:7000"
			c.DistributorUpstreams = []string{"10.0.0.9:7000"}
		}, "own RPC address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := TestConfig("n1")
			cfg.DataDir = t.TempDir()
			tc.change(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	cfg := TestConfig("n1")
	cfg.DataDir = t.TempDir()
	cfg.DistributorUpstreams = many[:MaxDistributorUpstreams]
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate with %d upstreams: %v", MaxDistributorUpstreams, err)
	}
}
