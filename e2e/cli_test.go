package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/internal/testwait"
)

// TestDemoOnceBinary runs 'slicerd demo --once' as a user would and checks
// that the script completes and shuts down cleanly.
func TestDemoOnceBinary(t *testing.T) {
	code, out := runSlicerd(t, "demo", "--once",
		"--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local",
		"--step", "1s", "--keys", "200", "--rebalance-delay", "100ms", "--startup-grace", "300ms")
	if code != 0 {
		t.Fatalf("demo --once exited %d; output:\n%s", code, out)
	}
	for _, want := range []string{
		"slicerd job watch --addr 127.0.0.1:", // a built binary is run by name, not with go run
		"== stopping kv-1", "== starting kv-3", "wrote 200 keys", "== script done (--once)", "== stopped cleanly",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

// TestDemoPythonTasksBinary runs the demo with a Python task under a
// sidecar beside the Go tasks: it gets its share of the keys, serves them
// (its cache's entries are counted) and stops cleanly.
func TestDemoPythonTasksBinary(t *testing.T) {
	py := python(t)
	code, out := runSlicerd(t, "demo", "--once", "--python-tasks", "1", "--python", py, "--python-dir", "..",
		"--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local",
		"--step", "1s", "--keys", "200", "--rebalance-delay", "100ms", "--startup-grace", "300ms")
	if code != 0 {
		t.Fatalf("demo --once --python-tasks 1 exited %d; output:\n%s", code, out)
	}
	for _, want := range []string{
		"py-0 (Python, under a sidecar)", "== stopping kv-1", "== starting kv-3", "== stopped cleanly",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	// The last count of each cache's entries gives py-0 some.
	i := strings.LastIndex(out, "entries held by each task's cache:")
	if i < 0 || !regexp.MustCompile(`py-0 [1-9][0-9]*`).MatchString(out[i:]) {
		t.Errorf("py-0 holds no entries at the end:\n%s", out)
	}
	code, out = runSlicerd(t, "demo", "--once", "--python-tasks", "1", "--python-dir", t.TempDir())
	if code != 2 || !strings.Contains(out, "--python-dir") {
		t.Errorf("demo with a --python-dir without the example: exit %d, %s; want 2 and a word on --python-dir", code, out)
	}
}

// TestDemoOnceGoRun runs the demo as README says, through go run, and
// checks that the commands it suggests are ones a go run user can run.
func TestDemoOnceGoRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "..", "demo", "--once",
		"--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local",
		"--step", "500ms", "--keys", "100", "--rebalance-delay", "100ms", "--startup-grace", "300ms")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run . demo --once: %v; output:\n%s", err, out.String())
	}
	for _, want := range []string{"go run . job watch --addr 127.0.0.1:", "== stopped cleanly"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "  slicerd job") {
		t.Errorf("demo suggests running slicerd by name, which go run did not install:\n%s", out.String())
	}
}

// TestJobCommandsBinary runs every job subcommand against a real node, and
// one against a node without the role that serves it.
func TestJobCommandsBinary(t *testing.T) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	startKV(t, "kv-0", node.gossipAddr)

	// watch runs until interrupted, printing every assignment.
	watch := start(t, "job watch", bin.slicerd, "job", "watch", "--addr", node.rpcAddr, "kv")
	watch.waitLine(30*time.Second, "job kv generation ", "over 1 tasks")
	watch.waitLine(time.Second, "kv-0 ", "100.00% of keys")

	code, out := runSlicerd(t, "job", "set", "--addr", node.rpcAddr, "--max-redundancy", "2", "--move-churn", "0.2", "kv")
	if code != 0 || !strings.Contains(out, "max redundancy  2\n") || !strings.Contains(out, "move churn           0.2\n") {
		t.Errorf("job set: exit %d, output:\n%s", code, out)
	}
	code, out = runSlicerd(t, "job", "get", "--addr", node.rpcAddr, "kv")
	for _, want := range []string{"job kv\n", "max redundancy  2\n", "live tasks      1\n", "    kv-0 ", "move churn           0.2\n"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("job get: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	// freeze and unfreeze keep every other setting; an unknown job is an
	// error, not a new job.
	code, out = runSlicerd(t, "job", "freeze", "--addr", node.rpcAddr, "kv")
	if code != 0 || !strings.Contains(out, "frozen          true\n") || !strings.Contains(out, "max redundancy  2\n") {
		t.Errorf("job freeze: exit %d, output:\n%s", code, out)
	}
	code, out = runSlicerd(t, "job", "unfreeze", "--addr", node.rpcAddr, "kv")
	if code != 0 || !strings.Contains(out, "frozen          false\n") || !strings.Contains(out, "move churn           0.2\n") {
		t.Errorf("job unfreeze: exit %d, output:\n%s", code, out)
	}
	code, out = runSlicerd(t, "job", "freeze", "--addr", node.rpcAddr, "nosuchjob")
	if code != 1 || !strings.Contains(out, `no job "nosuchjob"`) {
		t.Errorf("job freeze of an unknown job: exit %d, output:\n%s", code, out)
	}
	code, out = runSlicerd(t, "job", "list", "--addr", node.rpcAddr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "JOB ") || strings.Fields(lines[1])[0] != "kv" ||
		strings.Fields(lines[1])[3] != "2" || strings.Fields(lines[1])[4] != "1" {
		t.Errorf("job list: exit %d; want a header and kv with max redundancy 2 and 1 task:\n%s", code, out)
	}

	watch.signal(syscall.SIGINT)
	if code := watch.wait(20 * time.Second); code != 0 {
		t.Errorf("job watch exited %d after SIGINT", code)
	}

	distributor := startSlicerd(t, "distributor-1", "--role", "distributor", "--join", node.gossipAddr)
	code, out = runSlicerd(t, "job", "list", "--addr", distributor.rpcAddr)
	if want := "job list is served by the assigner role; " + distributor.rpcAddr + " runs no assigner"; code != 1 || !strings.Contains(out, want) {
		t.Errorf("job list against a distributor: exit %d, output:\n%s\nwant exit 1 and %q", code, out, want)
	}
}

// TestTaskCapacityBinary: a kvserver started with -capacity advertises it
// in its gossip tags, and job get shows it for that task alone; an invalid
// -capacity stops kvserver at start with a message naming the bounds.
func TestTaskCapacityBinary(t *testing.T) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	startKV(t, "kv-0", node.gossipAddr)
	startKV(t, "kv-1", node.gossipAddr, "-capacity", "2.5")
	var out string
	testwait.Until(t, 30*time.Second, "job get to show both tasks, kv-1 with capacity 2.5", func() bool {
		var code int
		code, out = runSlicerd(t, "job", "get", "--addr", node.rpcAddr, "kv")
		return code == 0 && strings.Contains(out, "live tasks      2\n") && strings.Contains(out, " capacity 2.5\n")
	})
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "kv-0 ") && strings.Contains(line, "capacity") {
			t.Errorf("kv-0 advertises no capacity, but job get shows %q", line)
		}
	}

	bad := start(t, "kv-bad", bin.kvserver, "-job", "kv", "-task", "kv-9", "-capacity", "-1", "-join", node.gossipAddr)
	if code := bad.wait(20 * time.Second); code != 2 || !strings.Contains(bad.output(), "invalid task capacity: -1; give a relative capacity between 0.001 and 1000") {
		t.Errorf("kvserver -capacity -1: exit %d, output:\n%s", code, bad.output())
	}
}

// TestMemoryLimitBinary: with real processes, kvserver -memory-limit is
// advertised through gossip and shown by slicerd job get, the entries'
// size travels with the load reports, and once kv-1 holds more entries
// than its limit the Assigner moves slices off it until it is within; a
// negative limit is refused at start.
func TestMemoryLimitBinary(t *testing.T) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir(), "--rebalance-interval", "1s")
	startKV(t, "kv-0", node.gossipAddr, "-load-window", "300ms")
	startKV(t, "kv-1", node.gossipAddr, "-load-window", "300ms", "-memory-limit", "40000")

	ctx := context.Background()
	ck := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	testwait.Until(t, 30*time.Second, "an assignment over both tasks", func() bool {
		a := ck.Assignment()
		return a != nil && len(a.Tasks) == 2
	})
	// 200 entries of about 1 KiB (208 KiB with the cache's overhead): an
	// even half is more than twice kv-1's limit. They are written again in
	// every round, so entries that a move dropped come back at their new
	// owner; the job settles once kv-1 holds at most its limit and kv-0
	// the rest.
	kv := kvcache.NewClient(ck, nil)
	val := bytes.Repeat([]byte("v"), 1000)
	var out string
	testwait.Until(t, 60*time.Second, "kv-1 within its 39.06 KiB limit and kv-0 holding the rest", func() bool {
		for i := range 200 {
			if err := kv.Put(ctx, fmt.Sprintf("key-%d", i), val); err != nil {
				return false // a move in flight: the next round writes it
			}
		}
		var code int
		code, out = runSlicerd(t, "job", "get", "--addr", node.rpcAddr, "kv")
		if code != 0 || !strings.Contains(out, "memory limit 39.06 KiB\n") {
			return false
		}
		held0, held1 := stateOf(out, "kv-0"), stateOf(out, "kv-1")
		return held1 <= 40000 && held0 >= 200*1064-40000
	})
	t.Logf("job get:\n%s", out)
	if !strings.Contains(out, "kv-0 ") || strings.Count(out, "memory limit") != 1 {
		t.Errorf("only kv-1 advertises a memory limit:\n%s", out)
	}

	bad := start(t, "kv-bad", bin.kvserver, "-job", "kv", "-task", "kv-9", "-memory-limit", "-1", "-join", node.gossipAddr)
	if code := bad.wait(20 * time.Second); code != 2 || !strings.Contains(bad.output(), "invalid task memory limit: -1") {
		t.Errorf("kvserver -memory-limit -1: exit %d, output:\n%s", code, bad.output())
	}
}

// stateOf reads the state job get shows for task in its load lines
// ("<task>  <load>/s  <x> x mean  state <n> <unit>"); -1 if none.
func stateOf(out, task string) float64 {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != task || !strings.Contains(line, "/s") {
			continue
		}
		i := strings.Index(line, "state ")
		if i < 0 {
			return 0
		}
		var n float64
		var unit string
		if _, err := fmt.Sscanf(line[i+len("state "):], "%g %s", &n, &unit); err != nil {
			return -1
		}
		for _, u := range []string{"B", "KiB", "MiB", "GiB"} {
			if unit == u {
				return n
			}
			n *= 1024
		}
		return -1
	}
	return -1
}

// TestJobMoveBinary: with real processes, 'slicerd job move' pins a key to
// a task at once, 'job get' shows the pin with its reason, a pin to a task
// that is not live is refused, the pin goes inactive (and the key moves on)
// when its task stops, and 'job unpin' removes it.
func TestJobMoveBinary(t *testing.T) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	kvs := map[string]*kvTask{}
	for _, name := range []string{"kv-0", "kv-1", "kv-2"} {
		kvs[name] = startKV(t, name, node.gossipAddr)
	}
	ck := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	testwait.Until(t, 30*time.Second, "an assignment over all three tasks", func() bool {
		a := ck.Assignment()
		return a != nil && len(a.Tasks) == 3
	})
	owner := func() string {
		addr, _ := ck.PickTaskString("user:42")
		for name, kv := range kvs {
			if kv.addr == addr {
				return name
			}
		}
		return ""
	}
	to := "kv-2"
	if owner() == to {
		to = "kv-1"
	}
	code, out := runSlicerd(t, "job", "move", "--addr", node.rpcAddr, "--key", "user:42", "--to", to, "--reason", "ticket 42", "kv")
	if code != 0 || !hasLine(out, "-> "+to, `"ticket 42"`) {
		t.Fatalf("job move: exit %d:\n%s", code, out)
	}
	testwait.Until(t, 10*time.Second, "user:42 routed to "+to, func() bool { return owner() == to })

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--key", "user:42", "--to", "kv-9", "kv"}, 1, `job "kv" has no live task "kv-9"`},
		{[]string{"--to", "kv-1", "kv"}, 2, "needs one of --key or --slice"},
		{[]string{"--key", "a", "--slice", "0x0-0x10", "--to", "kv-1", "kv"}, 2, "needs one of --key or --slice"},
		{[]string{"--slice", "0x10-0x1", "--to", "kv-1", "kv"}, 2, "invalid --slice"},
		{[]string{"--key", "a", "--to", "kv-1", "nosuchjob"}, 1, `no job "nosuchjob"`},
	} {
		code, out := runSlicerd(t, append([]string{"job", "move", "--addr", node.rpcAddr}, tc.args...)...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("job move %v: exit %d, want %d and %q:\n%s", tc.args, code, tc.code, tc.want, out)
		}
	}

	// The pinned task stops: the pin stays, inactive, and the key moves.
	kvs[to].signal(syscall.SIGTERM)
	kvs[to].wait(40 * time.Second)
	delete(kvs, to)
	testwait.Until(t, 20*time.Second, "user:42 on a live task", func() bool { o := owner(); return o != "" && o != to })
	if code, out := runSlicerd(t, "job", "get", "--addr", node.rpcAddr, "kv"); code != 0 || !hasLine(out, "-> "+to, "inactive") {
		t.Errorf("job get does not show the inactive pin: exit %d:\n%s", code, out)
	}
	code, out = runSlicerd(t, "job", "unpin", "--addr", node.rpcAddr, "--key", "user:42", "kv")
	if code != 0 || strings.Contains(out, "  pins\n") {
		t.Errorf("job unpin: exit %d:\n%s", code, out)
	}
}

// TestJobWatchStopsQuietly: job watch stopped by SIGINT or SIGTERM exits 0
// and prints nothing after the assignments it streamed: no log line about
// shutting down, no error about the cancelled stream.
func TestJobWatchStopsQuietly(t *testing.T) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	startKV(t, "kv-0", node.gossipAddr)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		watch := start(t, "job watch", bin.slicerd, "job", "watch", "--addr", node.rpcAddr, "kv")
		last := watch.waitLine(30*time.Second, "job kv generation ", "over 1 tasks")
		watch.signal(sig)
		if code := watch.wait(20 * time.Second); code != 0 {
			t.Errorf("job watch after %v: exit %d; want 0", sig, code)
		}
		out := watch.output()
		if i := strings.LastIndex(out, last); strings.Contains(out, "shutting down") || strings.Contains(out, "slicerd:") || strings.Contains(out, "canceled") {
			t.Errorf("job watch printed more than assignments after %v:\n%s", sig, out[i:])
		}
	}
}

// TestDemoStopsWithItsParent: the demo stops, cleanly, when the process that
// started it is killed, as 'go run . demo' is when signalled ('go run' does
// not pass the signal on). Here a shell stands for 'go run'.
func TestDemoStopsWithItsParent(t *testing.T) {
	parent := start(t, "sh running slicerd demo", "/bin/sh", "-c", `"$0" demo --rpc-addr 127.0.0.1:0 --gossip-addr 127.0.0.1:0 & wait`, bin.slicerd)
	parent.waitLine(60*time.Second, "From another terminal")
	parent.signal(syscall.SIGKILL)
	// The demo shares the shell's output: it is closed, and wait returns,
	// once the demo has exited too.
	parent.wait(60 * time.Second)
	if out := parent.output(); !strings.Contains(out, "== shutting down") || !strings.Contains(out, "== stopped cleanly") {
		t.Errorf("the demo did not shut down cleanly when its parent died:\n%s", out)
	}
}
