package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// What the local API adds to a change of ranges: for every generation
// that changes the task's ranges, the time from the sidecar's Slicelet
// installing it (where a Go task's Slicelet would hand it to the task) to
// the Python library applying it in the application, both read from the
// machine's wall clock. The application drains and undrains its task to
// make the changes. It also reports the sidecar's RSS.
func TestSidecarRangesLatency(t *testing.T) {
	py := python(t)
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir(), "--rebalance-delay", "50ms")
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	defer app.Close()
	startKV(t, "kv-1", node.gossipAddr)
	sock := filepath.Join(t.TempDir(), "sidecar.sock")
	args := []string{"sidecar", "--job", "kv", "--task", "app-0", "--app-addr", app.Listener.Addr().String(), "--join", node.gossipAddr,
		"--health-interval", "200ms", "--local-api-socket", sock, "--log-level", "debug"}
	sc := startEnv(t, "sidecar", bin.slicerd, append(append(os.Environ(), "SLICERD_LOG_FORMAT=json"), secureEnv(bin.slicerd, args)...), args...)
	sc.waitLine(30*time.Second, "sidecar local API serving")

	const rounds = 15
	cmd := exec.Command(py, "-c", `
import sys, time, slicerd_task
t = slicerd_task.Task(sys.argv[1], on_change=lambda gen, gained, lost: print("applied", gen, time.time_ns(), flush=True)).start()
t.wait_generation(1, 30)
for i in range(int(sys.argv[2])):
    t.set_draining(True)
    time.sleep(0.3)
    t.set_draining(False)
    time.sleep(0.5)
t.close()
`, sock, strconv.Itoa(rounds))
	cmd.Env = append(os.Environ(), "PYTHONPATH=../clients/python")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	applied := map[uint64]int64{}
	for sc := bufio.NewScanner(out); sc.Scan(); {
		var gen uint64
		var at int64
		if _, err := fmt.Sscanf(sc.Text(), "applied %d %d", &gen, &at); err == nil {
			applied[gen] = at
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the Python application: %v", err)
	}
	var delays []time.Duration
	for _, line := range strings.Split(sc.output(), "\n") {
		var l struct {
			Time       time.Time
			Msg        string
			Generation uint64
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "slicelet: assignment installed" {
			continue
		}
		if at, ok := applied[l.Generation]; ok {
			delays = append(delays, time.Unix(0, at).Sub(l.Time))
		}
	}
	if len(delays) < rounds {
		t.Fatalf("%d generations both installed and applied; want at least %d", len(delays), rounds)
	}
	slices.Sort(delays)
	rss := rssBytes(t, sc.cmd.Process.Pid)
	t.Logf("Slicelet install → Python application applied, %d changes: p50 %v, p99 %v, max %v; sidecar RSS %d MiB",
		len(delays), delays[len(delays)/2].Round(time.Microsecond), delays[len(delays)*99/100].Round(time.Microsecond),
		delays[len(delays)-1].Round(time.Microsecond), rss>>20)
	if delays[0] < 0 {
		t.Errorf("the application applied generation before the sidecar installed it (%v): the measurement is wrong", delays[0])
	}
}

// What a handle costs an application behind the sidecar: from Python, a
// request's acquire, its kept() check and its release, on a strong job's
// only task (it owns every key). The release of a handle whose HeldFor
// promise has not passed is answered from memory and sent without waiting,
// so the three cost one round trip. Reported beside the same machine's
// floor: a bare Unix-socket echo from Python to a Go server.
func TestSidecarHandleLatency(t *testing.T) {
	py := python(t)
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir(), "--rebalance-delay", "50ms")
	if code, out := runSlicerd(t, "job", "set", "--addr", node.rpcAddr, "--consistency", "strong", "kv"); code != 0 {
		t.Fatalf("job set --consistency strong: exit %d: %s", code, out)
	}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	defer app.Close()
	sock := filepath.Join(t.TempDir(), "sidecar.sock")
	args := []string{"sidecar", "--job", "kv", "--task", "app-0", "--app-addr", app.Listener.Addr().String(), "--join", node.gossipAddr,
		"--health-interval", "200ms", "--local-api-socket", sock, "--consistency", "strong"}
	startEnv(t, "sidecar", bin.slicerd, append(os.Environ(), secureEnv(bin.slicerd, args)...), args...).
		waitLine(30*time.Second, "sidecar local API serving")

	// What Go's HTTP/1.1 server alone costs a call from the library: a
	// handler that answers at once.
	plain := filepath.Join(t.TempDir(), "http.sock")
	hln, err := net.Listen("unix", plain)
	if err != nil {
		t.Fatal(err)
	}
	hsrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"handle":"7","owned":true}`))
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hsrv.Serve(hln) }()
	defer hsrv.Close()

	echo := filepath.Join(t.TempDir(), "echo.sock")
	ln, err := net.Listen("unix", echo)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 4096)
				for {
					n, err := c.Read(b)
					if err != nil {
						return
					}
					if _, err := c.Write(b[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()

	cmd := exec.Command(py, "-c", `
import socket, sys, time, slicerd_task
def pct(ds):
    ds = sorted(ds[500:])
    return "p50 %.0f us, p99 %.0f us, max %.0f us" % (ds[len(ds)//2]/1e3, ds[len(ds)*99//100]/1e3, ds[-1]/1e3)
t = slicerd_task.Task(sys.argv[1])
deadline = time.monotonic() + 30
while not t.acquire(b"warm").release():  # until the task holds its lease
    if time.monotonic() > deadline:
        sys.exit("the task never owned a key")
    time.sleep(0.05)
ds, memory = [], 0
for i in range(5000):
    t0 = time.perf_counter_ns()
    h = t.acquire(b"key-%d" % i)
    kept = h.kept()
    memory += h.held_until is not None and kept
    if not (h.release() and kept):
        sys.exit("key-%d: owned %s, kept %s" % (i, h.owned, kept))
    ds.append(time.perf_counter_ns() - t0)
print("handle acquire, kept() and release over the local API: %s; %d of 5000 answered from memory" % (pct(ds), memory))
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[2])
ds = []
for i in range(5000):
    t0 = time.perf_counter_ns()
    s.sendall(b"x" * 200)
    s.recv(4096)
    ds.append(time.perf_counter_ns() - t0)
print("the machine's floor, a Unix-socket echo from Python to Go: %s" % pct(ds))
c = slicerd_task._Conn(sys.argv[3])
ds = []
for i in range(5000):
    t0 = time.perf_counter_ns()
    c.call("/x", b'{"key":"a2V5"}', 5)
    ds.append(time.perf_counter_ns() - t0)
print("and a call to a trivial Go net/http handler over a Unix socket: %s" % pct(ds))
`, sock, echo, plain)
	cmd.Env = append(os.Environ(), "PYTHONPATH=../clients/python")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the Python loop: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(string(out)))
	if !strings.Contains(string(out), "5000 of 5000 answered from memory") {
		t.Errorf("some handles were not released from memory: with one task and no move, every promise should hold")
	}
}
