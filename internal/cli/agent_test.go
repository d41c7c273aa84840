package cli

import (
	"context"
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
