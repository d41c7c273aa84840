package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/tlsconfig"
)

// python returns the Python interpreter with the slicerd_task library's
// one dependency (xxhash), which scripts/python.sh installs: $SLICERD_PYTHON,
// else python3. Outside CI a missing one skips the test.
func python(t *testing.T) string {
	t.Helper()
	py := os.Getenv("SLICERD_PYTHON")
	if py == "" {
		py = "python3"
	}
	if out, err := exec.Command(py, "-c", "import xxhash").CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s cannot import xxhash (%v: %s); scripts/python.sh installs it", py, err, out)
		}
		t.Skipf("%s cannot import xxhash; run scripts/python.sh (Debian's python3-xxhash)", py)
	}
	return py
}

// A Python application follows its task through the sidecar with the
// slicerd_task library (clients/python): the keys it says it holds are
// exactly those the assignment gives the task, checked against a Clerk at
// the same generation, before and after a drain it asks for; bad load is
// refused.
func TestSidecarPythonTask(t *testing.T) {
	py := python(t)
	followAppTask(t, "Python", func(sock string) *exec.Cmd {
		cmd := exec.Command(py, "testdata/pytask.py", sock)
		cmd.Env = append(os.Environ(), "PYTHONPATH=../clients/python")
		return cmd
	})
}

// The same with a Node.js application and the slicerd-task library
// (clients/node).
func TestSidecarNodeTask(t *testing.T) {
	node := nodeJS(t)
	followAppTask(t, "Node", func(sock string) *exec.Cmd { return exec.Command(node, "testdata/nodetask.mjs", sock) })
}

// nodeJS returns node, with clients/node's dependencies installed
// (scripts/node.sh). Outside CI a missing one skips the test.
func nodeJS(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat("../clients/node/node_modules/xxhash-wasm")
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("node or clients/node's dependencies are missing (%v); scripts/node.sh installs them", err)
		}
		t.Skipf("node or clients/node's dependencies are missing (%v); run scripts/node.sh", err)
	}
	return node
}

// followAppTask runs the application start gives (testdata/pytask.py or
// nodetask.mjs, started with the local API's socket) beside a sidecar, and
// checks each step it prints against a Clerk.
func followAppTask(t *testing.T, lang string, start func(sock string) *exec.Cmd) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	defer app.Close()
	startKV(t, "kv-1", node.gossipAddr)
	sock := filepath.Join(t.TempDir(), "sidecar.sock")
	args := []string{"sidecar", "--job", "kv", "--task", "app-0", "--app-addr", app.Listener.Addr().String(), "--join", node.gossipAddr,
		"--health-interval", "200ms", "--local-api-socket", sock}
	sc := startEnv(t, "sidecar", bin.slicerd, append(append(os.Environ(), "SLICERD_LOG_FORMAT=json"), secureEnv(bin.slicerd, args)...), args...)
	sc.waitLine(30*time.Second, "sidecar local API serving")
	c := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})

	cmd := start(sock)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	type step struct {
		Step       string
		Generation uint64
		Owned      []int
		NsPerOwns  float64 `json:"ns_per_owns"`
		Code       string
		Tokens     []uint64
		Continuous int
	}
	read := func(want string) step {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("the %s task ended before %q: %v", lang, want, lines.Err())
		}
		var s step
		if err := json.Unmarshal(lines.Bytes(), &s); err != nil || s.Step != want {
			t.Fatalf("the %s task printed %q; want step %q", lang, lines.Text(), want)
		}
		return s
	}
	// agrees checks the application's keys against the Clerk's assignment
	// of the same generation.
	agrees := func(s step) {
		t.Helper()
		testwait.Until(t, 10*time.Second, fmt.Sprintf("the Clerk to hold generation %d", s.Generation), func() bool {
			a := c.Assignment()
			return a != nil && a.Generation >= s.Generation
		})
		a := c.Assignment()
		if a.Generation != s.Generation {
			t.Logf("the Clerk moved past generation %d; not compared", s.Generation)
			return
		}
		var want []int
		for i := range 2000 {
			h := assign.HashString(fmt.Sprintf("key-%d", i))
			sl := a.Slices[slices.IndexFunc(a.Slices, func(s assign.Slice) bool { return s.Start <= h && h < s.End })]
			if slices.Contains(sl.Tasks, "app-0") {
				want = append(want, i)
			}
		}
		if !slices.Equal(s.Owned, want) {
			t.Fatalf("generation %d: the %s task holds %d of the 2,000 keys, the assignment gives it %d (they differ)", s.Generation, lang, len(s.Owned), len(want))
		}
		t.Logf("generation %d: the %s task holds %d of 2,000 keys, as the assignment says", s.Generation, lang, len(s.Owned))
	}
	agrees(read("held"))
	t.Logf("owns(key) in %s: %.0f ns", lang, read("lookup").NsPerOwns)
	drained := read("drained")
	a := c.Assignment()
	testwait.Until(t, 10*time.Second, "the Clerk to see the drain", func() bool {
		a = c.Assignment()
		return a.Generation >= drained.Generation
	})
	if slices.ContainsFunc(a.Slices, func(s assign.Slice) bool { return slices.Contains(s.Tasks, "app-0") }) && a.Generation == drained.Generation {
		t.Fatalf("generation %d gives app-0 keys though the %s task drained", a.Generation, lang)
	}
	back := read("back")
	agrees(back)
	// Handles, in affinity mode: owned as the ranges say, the generation
	// as the token, and continuous while nothing moved.
	h := read("handles")
	want := slices.DeleteFunc(slices.Clone(back.Owned), func(i int) bool { return i >= 50 })
	if h.Generation != back.Generation {
		t.Logf("the assignment moved on to generation %d during the handles; not compared", h.Generation)
	} else if !slices.Equal(h.Owned, want) || h.Continuous != len(want) || (len(want) > 0 && !slices.Equal(h.Tokens, []uint64{back.Generation})) {
		t.Fatalf("handles on the first 50 keys from %s: owned %v, tokens %v, %d continuous; want owned %v, token %d, all continuous",
			lang, h.Owned, h.Tokens, h.Continuous, want, back.Generation)
	}
	t.Logf("%s took and released handles on %d of the first 50 keys, tokens %v", lang, len(h.Owned), h.Tokens)
	if s := read("bad-load"); s.Code != "invalid_argument" {
		t.Fatalf("a bad load from %s: %q; want invalid_argument", lang, s.Code)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the %s task: %v", lang, err)
	}
}

// The kvcache example in Python (examples/kvcache/python), under a
// sidecar, shares job kv with a Go kvserver: the Go kvcache client, routing
// through a Clerk, writes and reads keys on both; SIGTERM of the sidecar
// drains the Python task with no client request failing; and when the
// Python process is killed its (new) sidecar's health checks move its keys
// to the Go task, and the client's new writes and reads all succeed there.
func TestSidecarMixedJobPython(t *testing.T) {
	py := python(t)
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	startKV(t, "kv-0", node.gossipAddr)
	sock := filepath.Join(t.TempDir(), "sidecar.sock")
	appAddr := testnet.FreeAddr(t)
	// With TLS the application serves with the task's certificate, and the
	// sidecar checks it by a TCP connect (its --health-url is http only).
	args := []string{"sidecar", "--job", "kv", "--task", "py-0", "--app-addr", appAddr, "--join", node.gossipAddr,
		"--local-api-socket", sock} // the default health checks, 500 ms × 3
	appArgs := []string{"../examples/kvcache/python/kvserver.py", "--addr", appAddr, "--local-api-socket", sock}
	if secure {
		f := issue("task-kv-py-0", identity.ID{Role: identity.Task, Job: "kv", Task: "py-0"})
		appArgs = append(appArgs, "--job", "kv", "--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA)
	} else {
		args = append(args, "--health-url", "http://"+appAddr+"/healthz")
	}
	sc := startEnv(t, "sidecar", bin.slicerd, append(append(os.Environ(), "SLICERD_LOG_FORMAT=json"), secureEnv(bin.slicerd, args)...), args...)
	sc.waitLine(30*time.Second, "sidecar local API serving")
	pyApp := exec.Command(py, appArgs...)
	pyApp.Env = append(os.Environ(), "PYTHONPATH=../clients/python")
	pyApp.Stdout, pyApp.Stderr = os.Stderr, os.Stderr
	if err := pyApp.Start(); err != nil {
		t.Fatal(err)
	}
	pyDone := make(chan error, 1)
	go func() { pyDone <- pyApp.Wait() }()
	defer func() {
		pyApp.Process.Kill()
		<-pyDone
	}()
	c := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	holds := func(task string) bool {
		a := c.Assignment()
		return a != nil && slices.ContainsFunc(a.Slices, func(s assign.Slice) bool { return slices.Contains(s.Tasks, task) })
	}
	testwait.Until(t, 30*time.Second, "keys on both the Go and the Python task", func() bool { return holds("kv-0") && holds("py-0") })
	kv := kvcache.NewClient(c, &http.Client{Timeout: 5 * time.Second})
	defer kv.Close()
	ctx := context.Background()
	putAll := func(prefix string) {
		t.Helper()
		for i := range 300 {
			if err := kv.Put(ctx, fmt.Sprintf("%s-%d", prefix, i), []byte(fmt.Sprint(i))); err != nil {
				t.Fatalf("put %s-%d: %v", prefix, i, err)
			}
		}
		for i := range 300 {
			val, found, err := kv.Get(ctx, fmt.Sprintf("%s-%d", prefix, i))
			if err != nil || !found || string(val) != fmt.Sprint(i) {
				t.Fatalf("get %s-%d = %q, %v, %v; want %d", prefix, i, val, found, err, i)
			}
		}
	}
	putAll("a")
	statsClient, scheme := http.DefaultClient, "http"
	if secure {
		// An admin is not a client of the job: the task refuses it, and
		// serves a client of the job.
		src := clientSource("kv")
		statsClient = &http.Client{Transport: &http.Transport{TLSClientConfig: src.ClientConfig(tlsconfig.WantTask("kv", "py-0"))}}
		scheme = "https"
		adminTLS := clientSource("").ClientConfig(tlsconfig.WantTask("kv", "py-0"))
		resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: adminTLS}}).Get("https://" + appAddr + "/stats")
		if err != nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("the Python task's stats as an admin: %v, %v; want 403", resp, err)
		}
		resp.Body.Close()
	}
	resp, err := statsClient.Get(scheme + "://" + appAddr + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	var stats struct{ Entries, Served int }
	err = json.NewDecoder(resp.Body).Decode(&stats)
	resp.Body.Close()
	if err != nil || stats.Entries == 0 {
		t.Fatalf("the Python task's stats: %+v, %v; want some of the 300 entries", stats, err)
	}
	t.Logf("the Python task holds %d of 300 entries, served %d requests", stats.Entries, stats.Served)

	// SIGTERM of the sidecar drains the Python task while a client keeps
	// writing and reading: no request fails (reads of entries that were on
	// the Python task may miss, as a cache's do).
	var ops, failed, slowest atomic.Int64
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			default:
			}
			key := fmt.Sprintf("c-%d", i%500)
			t0 := time.Now()
			if err := kv.Put(ctx, key, []byte("v")); err != nil {
				failed.Add(1)
				t.Logf("put %s during the drain: %v", key, err)
			}
			t1 := time.Now()
			if _, _, err := kv.Get(ctx, key); err != nil {
				failed.Add(1)
				t.Logf("get %s during the drain: %v", key, err)
			}
			if d := time.Since(t0); d > time.Duration(slowest.Load()) {
				slowest.Store(int64(d))
				t.Logf("slowest put+get so far during the drain: %s, put %v, get %v", key, t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
			}
			ops.Add(2)
		}
	}()
	sc.signal(syscall.SIGTERM)
	if code := sc.wait(20 * time.Second); code != 0 {
		t.Fatalf("the sidecar exited %d after SIGTERM", code)
	}
	testwait.Until(t, 10*time.Second, "the drained Python task's keys to be gone", func() bool { return !holds("py-0") })
	close(stopLoad)
	<-loadDone
	if failed.Load() != 0 {
		t.Fatalf("%d of %d client requests failed while the sidecar drained", failed.Load(), ops.Load())
	}
	t.Logf("sidecar SIGTERM: 0 of %d client requests failed during the drain", ops.Load())

	// A new sidecar for the same application: the task joins again.
	sc = startEnv(t, "sidecar", bin.slicerd, append(append(os.Environ(), "SLICERD_LOG_FORMAT=json"), secureEnv(bin.slicerd, args)...), args...)
	sc.waitLine(30*time.Second, "sidecar local API serving")
	testwait.Until(t, 30*time.Second, "the Python task to hold keys again", func() bool { return holds("py-0") })

	killed := time.Now()
	pyApp.Process.Kill()
	testwait.Until(t, 30*time.Second, "the dead Python task's keys to move", func() bool { return !holds("py-0") })
	t.Logf("Python application killed: its keys moved %v later (the default health checks, 500 ms × 3)", time.Since(killed).Round(time.Millisecond))
	putAll("b")
}
