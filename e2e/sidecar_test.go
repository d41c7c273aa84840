package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/internal/testwait"
)

// An HTTP server that knows nothing of slicerd becomes a task through
// 'slicerd sidecar': the assignment gives it keys at its own address; when
// it fails its health check the keys move to the job's other task and come
// back once it passes again; SIGTERM drains it, and the sidecar exits 0.
func TestSidecarMakesAnApplicationATask(t *testing.T) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	var healthy atomic.Bool
	healthy.Store(true)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && !healthy.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer app.Close()
	appAddr := app.Listener.Addr().String()
	startKV(t, "kv-1", node.gossipAddr)
	// Run as systemd runs a Type=notify unit with WatchdogSec.
	notify, next := notifySocket(t)
	args := []string{"sidecar", "--job", "kv", "--task", "app-0", "--app-addr", appAddr,
		"--join", node.gossipAddr, "--health-url", "http://" + appAddr + "/healthz", "--health-interval", "200ms",
		"--health-failures", "2", "--drain-timeout", "10s"}
	env := append(os.Environ(), "SLICERD_LOG_FORMAT=json", "NOTIFY_SOCKET="+notify, "WATCHDOG_USEC=1000000", "WATCHDOG_PID=")
	sc := startEnv(t, "sidecar", bin.slicerd, append(env, secureEnv(bin.slicerd, args)...), args...)
	if m, want := next("READY=1"), "READY=1\nSTATUS=task kv/app-0, serving at "+appAddr; m != want {
		t.Fatalf("first notification %q; want %q", m, want)
	}
	c := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})

	holds := func() bool {
		a := c.Assignment()
		if a == nil {
			return false
		}
		at := ""
		for _, task := range a.Tasks {
			if task.Name == "app-0" {
				at = task.Addr
			}
		}
		return at == appAddr && slices.ContainsFunc(a.Slices, func(s assign.Slice) bool { return slices.Contains(s.Tasks, "app-0") })
	}
	took := testwait.Until(t, 30*time.Second, "app-0 to hold keys at the application's address", holds)
	t.Logf("app-0 held keys %v after the sidecar started", took.Round(time.Millisecond))

	healthy.Store(false)
	took = testwait.Until(t, 30*time.Second, "app-0 to give its keys away while unhealthy", func() bool { return !holds() })
	t.Logf("unhealthy: keys moved away in %v", took.Round(time.Millisecond))
	sc.waitLine(5*time.Second, "failed its health check")

	healthy.Store(true)
	took = testwait.Until(t, 30*time.Second, "app-0 to hold keys again once healthy", holds)
	t.Logf("healthy again: keys back in %v", took.Round(time.Millisecond))

	if m := next("WATCHDOG=1"); m != "WATCHDOG=1" {
		t.Errorf("notification after READY=1 is %q; want WATCHDOG=1", m)
	}
	sc.signal(syscall.SIGTERM)
	for m := next("STOPPING=1"); !strings.HasPrefix(m, "STOPPING=1"); m = next("STOPPING=1") {
		if m != "WATCHDOG=1" {
			t.Fatalf("got %q while waiting for STOPPING=1", m)
		}
	}
	if code := sc.wait(30 * time.Second); code != 0 {
		t.Fatalf("the sidecar exited %d after SIGTERM:\n%s", code, sc.output())
	}
	sc.waitLine(time.Second, "sidecar draining")
	testwait.Until(t, 30*time.Second, "app-0 to hold no keys after it stopped", func() bool { return !holds() })
}
