package cli

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

// lineWriter collects output written concurrently and signals each write.
type lineWriter struct {
	mu      sync.Mutex
	b       strings.Builder
	written chan struct{}
}

func newLineWriter() *lineWriter { return &lineWriter{written: make(chan struct{}, 1)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	select {
	case w.written <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// startLine runs the agent with args until it logs that it started, stops
// it, and returns that log line.
func startLine(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := newLineWriter()
	done := make(chan int, 1)
	base := []string{"slicerd", "--node-name", "n1", "--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
		"--gossip-profile", "local", "--startup-grace", "10ms"}
	go func() { done <- runContext(ctx, append(base, args...), logs, logs) }()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, `msg="slicerd started"`) {
				cancel()
				if code := <-done; code != 0 {
					t.Errorf("slicerd %v exited %d:\n%s", args, code, logs.String())
				}
				return line
			}
		}
		select {
		case <-logs.written:
		case code := <-done:
			t.Fatalf("slicerd %v exited %d before starting:\n%s", args, code, logs.String())
		case <-deadline.C:
			t.Fatalf("slicerd %v did not log its start:\n%s", args, logs.String())
		}
	}
}

// TestStartLogNamesTheStoreUsed checks that a node logs the data dir only
// when it uses one: a Distributor alone opens no store, and an etcd store
// has no data dir.
func TestStartLogNamesTheStoreUsed(t *testing.T) {
	dir := t.TempDir()
	line := startLine(t, "--data-dir", dir)
	if !strings.Contains(line, "store=bolt") || !strings.Contains(line, "data_dir="+dir) {
		t.Errorf("all roles on bolt: start line lacks store=bolt and data_dir=%s:\n%s", dir, line)
	}
	line = startLine(t, "--role", "distributor", "--data-dir", dir)
	if strings.Contains(line, "data_dir") || !strings.Contains(line, "store=none") {
		t.Errorf("distributor alone: start line names a data dir or lacks store=none:\n%s", line)
	}
	etcd := etcdtest.Start(t)
	store := "etcd://" + etcd.Endpoint() + "/cli-test/"
	line = startLine(t, "--role", "assigner", "--store", store, "--data-dir", dir)
	if strings.Contains(line, "data_dir") || !strings.Contains(line, "store="+store) {
		t.Errorf("assigner on etcd: start line names a data dir or lacks store=%s:\n%s", store, line)
	}
}

func TestConnectionLimitFlags(t *testing.T) {
	cfg, code, out := agentConfigOf(t, nil)
	if code != 0 || cfg.MaxConnections != 8192 || cfg.MaxConnectionsPerIP != 1024 ||
		cfg.IdleTimeout != 5*time.Minute || cfg.ReadHeaderTimeout != 10*time.Second ||
		cfg.PingInterval != time.Minute || cfg.PingTimeout != 15*time.Second {
		t.Errorf("defaults: %d %d %v %v %v %v, exit %d: %s", cfg.MaxConnections, cfg.MaxConnectionsPerIP,
			cfg.IdleTimeout, cfg.ReadHeaderTimeout, cfg.PingInterval, cfg.PingTimeout, code, out)
	}
	cfg, code, out = agentConfigOf(t, map[string]string{
		"SLICERD_MAX_CONNECTIONS": "100", "SLICERD_MAX_CONNECTIONS_PER_IP": "10", "SLICERD_IDLE_TIMEOUT": "30s",
		"SLICERD_READ_HEADER_TIMEOUT": "2s", "SLICERD_PING_INTERVAL": "20s", "SLICERD_PING_TIMEOUT": "5s",
	})
	if code != 0 || cfg.MaxConnections != 100 || cfg.MaxConnectionsPerIP != 10 ||
		cfg.IdleTimeout != 30*time.Second || cfg.ReadHeaderTimeout != 2*time.Second ||
		cfg.PingInterval != 20*time.Second || cfg.PingTimeout != 5*time.Second {
		t.Errorf("from the environment: %d %d %v %v %v %v, exit %d: %s", cfg.MaxConnections, cfg.MaxConnectionsPerIP,
			cfg.IdleTimeout, cfg.ReadHeaderTimeout, cfg.PingInterval, cfg.PingTimeout, code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-connections", "0"}, "max connections (--max-connections) is 0; it must be positive"},
		{[]string{"--max-connections-per-ip", "-5"}, "max connections per IP (--max-connections-per-ip) is -5"},
		{[]string{"--max-connections", "10", "--max-connections-per-ip", "20"}, "at most max connections (10)"},
		{[]string{"--idle-timeout", "0"}, "idle timeout (--idle-timeout) is 0s; it must be positive"},
		{[]string{"--read-header-timeout", "-1s"}, "read header timeout (--read-header-timeout) is -1s"},
		{[]string{"--ping-interval", "0"}, "ping interval (--ping-interval) is 0s"},
		{[]string{"--ping-timeout", "0"}, "ping timeout (--ping-timeout) is 0s"},
	} {
		if _, code, out := agentConfigOf(t, nil, tc.args...); code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d: %s; want exit 2 saying %q", tc.args, code, out, tc.want)
		}
	}
}

func TestAllowedHostsFlag(t *testing.T) {
	cfg, code, out := agentConfigOf(t, nil)
	if code != 0 || len(cfg.AllowedHosts) != 0 {
		t.Errorf("default allowed hosts %q, exit %d: %s; want none", cfg.AllowedHosts, code, out)
	}
	cfg, code, out = agentConfigOf(t, map[string]string{"SLICERD_ALLOWED_HOSTS": " slicerd.test, *.svc.test ,"})
	if code != 0 || !slices.Equal(cfg.AllowedHosts, []string{"slicerd.test", "*.svc.test"}) {
		t.Errorf("from the environment: %q, exit %d: %s", cfg.AllowedHosts, code, out)
	}
	cfg, code, out = agentConfigOf(t, nil, "--allowed-hosts", "*")
	if code != 0 || !slices.Equal(cfg.AllowedHosts, []string{"*"}) {
		t.Errorf("--allowed-hosts '*': %q, exit %d: %s", cfg.AllowedHosts, code, out)
	}
	if _, code, out := agentConfigOf(t, nil, "--allowed-hosts", "slicerd.test:7070"); code != 2 || !strings.Contains(out, "allowed hosts") {
		t.Errorf("--allowed-hosts with a port: exit %d: %s; want exit 2 naming allowed hosts", code, out)
	}
}
