package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
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
