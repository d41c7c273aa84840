package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/internal/testwait"
)

// handoffArgs are the sidecar's and the Python kvserver's arguments for
// state handoff through a socket in dir.
func handoffArgs(dir string) (sidecar, app []string) {
	sock := filepath.Join(dir, "state.sock")
	return []string{"--app-state-socket", sock, "--handoff-addr", "127.0.0.1:0"}, []string{"--state-socket", sock}
}

// State handoff through sidecars: in a job of a Go kvserver and Python
// kvservers under sidecars, entries move with their keys in every
// direction — to a Python task that joins (from the Go task and the other
// Python task), from a Python task whose sidecar drains on SIGTERM, and
// from the Go task to the Python ones when it stops — so every key is
// found at its new owner without being written again.
func TestSidecarPythonHandoff(t *testing.T) {
	py := python(t)
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	kv0 := startKV(t, "kv-0", node.gossipAddr)
	startPy := func(name string) *pyTask {
		sc, app := handoffArgs(t.TempDir())
		return startPyTask(t, py, name, node.gossipAddr, sc, app)
	}
	py1 := startPy("py-1")
	ck := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	waitTasks := func(want ...string) {
		t.Helper()
		testwait.Until(t, 30*time.Second, fmt.Sprintf("an assignment over %v", want), func() bool {
			a := ck.Assignment()
			if a == nil || len(a.Tasks) != len(want) {
				return false
			}
			for _, name := range want {
				if _, ok := a.TaskIndex(name); !ok {
					return false
				}
			}
			return true
		})
	}
	waitTasks("kv-0", "py-1")
	kv := kvcache.NewClient(ck, &http.Client{Timeout: 5 * time.Second})
	defer kv.Close()
	const n = 1000
	writeKeys(t, kv, n)
	found := func() int { t.Helper(); return foundKeys(t, kv, n) }
	startPy("py-2")
	waitTasks("kv-0", "py-1", "py-2")
	joined := found()

	t.Log("py-1's sidecar: SIGTERM")
	py1.sidecar.signal(syscall.SIGTERM)
	if code := py1.sidecar.wait(40 * time.Second); code != 0 {
		t.Fatalf("py-1's sidecar exited %d", code)
	}
	waitTasks("kv-0", "py-2")
	drained := found()

	t.Log("kv-0: SIGTERM")
	kv0.signal(syscall.SIGTERM)
	if code := kv0.wait(40 * time.Second); code != 0 {
		t.Fatalf("kv-0 exited %d", code)
	}
	t.Log("kv-0 exited")
	waitTasks("py-2")
	fromGo := found()
	t.Logf("%d keys found: %d after py-2 joined, %d after py-1's sidecar drained, %d after kv-0 (Go) stopped", n, joined, drained, fromGo)
	if joined < n*99/100 || drained < n*99/100 || fromGo < n*99/100 {
		t.Errorf("found %d, %d and %d of %d keys; with handoff at least 99%% move with their entries", joined, drained, fromGo, n)
	}
}
