package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/internal/testwait"
)

// startAppSidecar starts a sidecar of task app-0 of job kv on sock,
// beside an application at appAddr, with the extra flags given, and waits
// until it serves its local API.
func startAppSidecar(t *testing.T, name, join, sock, appAddr string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"sidecar", "--job", "kv", "--task", "app-0", "--app-addr", appAddr, "--join", join,
		"--health-interval", "200ms", "--local-api-socket", sock}, extra...)
	sc := start(t, name, bin.slicerd, args...)
	sc.waitLine(30*time.Second, "sidecar local API serving")
	return sc
}

// startStrongSidecar is startAppSidecar in strong mode.
func startStrongSidecar(t *testing.T, name, join, sock, appAddr string) *proc {
	t.Helper()
	return startAppSidecar(t, name, join, sock, appAddr, "--drain-timeout", "5s", "--consistency", "strong", "--lease-ttl", "2s")
}

// A handle taken before the sidecar restarted answers continuous = false
// (docs/sidecar.md, sidecar.proto: "false for a handle the sidecar does
// not know (released, or taken before it restarted)"), and releasing it
// touches no handle the restarted sidecar gave out: each sidecar process
// numbers its handles from a random point. The task libraries do send
// such late releases: a release whose connection broke is sent again on
// a new one. Had the new sidecar given that number to another request,
// the late release would answer true for a key the task gave up, and
// would release the other request's handle, letting its key go before
// the end of the promise (held_for) it was given: two owners.
func TestSidecarHandlesAcrossARestart(t *testing.T) {
	_, a1, _ := startStrongCluster(t, "sidecar-handles")
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	defer app.Close()
	sock := filepath.Join(t.TempDir(), "sidecar.sock")
	ctx := context.Background()
	startKV(t, "kv-0", a1.gossipAddr, "-consistency", "strong", "-lease-ttl", "2s") // where keys go

	sc := startStrongSidecar(t, "sidecar-1", a1.gossipAddr, sock, app.Listener.Addr().String())
	api := localClient(sock)
	// acquire takes a handle on the first key of prefix-0, prefix-1, ...
	// the task owns, and returns it, its key, and when it was sent.
	acquire := func(prefix string) (*slicerv1.AcquireHandleResponse, string, time.Time) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for i := 0; ; i = (i + 1) % 64 {
			key := fmt.Sprintf("%s-%d", prefix, i)
			sent := time.Now()
			resp, err := api.AcquireHandle(ctx, connect.NewRequest(&slicerv1.AcquireHandleRequest{Key: []byte(key), WaitMs: 100}))
			if err == nil && resp.Msg.GetOwned() && resp.Msg.GetHeldForNs() > 0 {
				return resp.Msg, key, sent
			}
			if time.Now().After(deadline) {
				t.Fatalf("no handle on a key %s-N within 60s: %v", prefix, err)
			}
		}
	}
	old, _, _ := acquire("key-a")
	t.Logf("first sidecar: handle %d on key-a, token %d", old.GetHandle(), old.GetToken())

	// The sidecar restarts (a deploy, systemd's restart): it gives its
	// leases up on the way out.
	sc.signal(syscall.SIGTERM)
	if code := sc.wait(30 * time.Second); code != 0 {
		t.Fatalf("sidecar exited %d", code)
	}
	startStrongSidecar(t, "sidecar-2", a1.gossipAddr, sock, app.Listener.Addr().String())
	api = localClient(sock)
	cur, keyB, sentB := acquire("key-b")
	t.Logf("restarted sidecar: handle %d on key-b, token %d, held for %v", cur.GetHandle(), cur.GetToken(), time.Duration(cur.GetHeldForNs()))

	// The application releases its request on key-a, taken before the
	// restart, late (past its promise).
	rel, err := api.ReleaseHandle(ctx, connect.NewRequest(&slicerv1.ReleaseHandleRequest{Handle: old.GetHandle()}))
	if err != nil {
		t.Fatal(err)
	}
	chk, err := api.CheckHandle(ctx, connect.NewRequest(&slicerv1.CheckHandleRequest{Handle: cur.GetHandle()}))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("release of the pre-restart handle %d: continuous=%v; then the current request's handle %d: continuous=%v",
		old.GetHandle(), rel.Msg.GetContinuous(), cur.GetHandle(), chk.Msg.GetContinuous())
	if rel.Msg.GetContinuous() {
		t.Errorf("ReleaseHandle(%d) of a handle taken before the sidecar restarted answered continuous = true; want false", old.GetHandle())
	}
	if !chk.Msg.GetContinuous() {
		t.Errorf("the current request's handle %d on %s was released by the release of the pre-restart handle %d", cur.GetHandle(), keyB, old.GetHandle())
	}

	// The current request still holds its handle, and was promised its
	// key until heldUntil: a drain must not take the key away before
	// then. It no longer waits for the request.
	heldUntil := sentB.Add(time.Duration(cur.GetHeldForNs()))
	go api.SetDraining(ctx, connect.NewRequest(&slicerv1.SetDrainingRequest{Draining: true}))
	for {
		resp, err := api.AcquireHandle(ctx, connect.NewRequest(&slicerv1.AcquireHandleRequest{Key: []byte(keyB)}))
		if err != nil {
			t.Fatal(err)
		}
		if !resp.Msg.GetOwned() {
			break
		}
		api.ReleaseHandle(ctx, connect.NewRequest(&slicerv1.ReleaseHandleRequest{Handle: resp.Msg.GetHandle()}))
		if time.Now().After(heldUntil.Add(5 * time.Second)) {
			t.Fatalf("%s not given up", keyB)
		}
		time.Sleep(5 * time.Millisecond)
	}
	lost := time.Now()
	t.Logf("the sidecar gave %s up %v after the acquire; the request holding handle %d was promised it for %v",
		keyB, lost.Sub(sentB).Round(time.Millisecond), cur.GetHandle(), time.Duration(cur.GetHeldForNs()))
	if lost.Before(heldUntil) {
		t.Errorf("the sidecar gave %s up %v before the end of the promise it made to a request still holding its handle", keyB, heldUntil.Sub(lost).Round(time.Millisecond))
	}
}

// follower is an application (testdata/follow_ranges.py or .mjs)
// following its task through a task library; report asks it what it
// holds.
type follower struct {
	lang  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines *bufio.Scanner
}

type followReport struct {
	Generation uint64
	OnChange   []int `json:"on_change"` // the keys held as on_change's gained and lost say
	Owns       []int // the keys owns() says are held
}

func startFollower(t *testing.T, lang string, cmd *exec.Cmd) *follower {
	t.Helper()
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	return &follower{lang: lang, cmd: cmd, in: in, lines: sc}
}

func (f *follower) report(t *testing.T) followReport {
	t.Helper()
	if _, err := io.WriteString(f.in, "report\n"); err != nil {
		t.Fatal(err)
	}
	if !f.lines.Scan() {
		t.Fatalf("the %s follower ended: %v", f.lang, f.lines.Err())
	}
	var r followReport
	if err := json.Unmarshal(f.lines.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// An application that follows its keys through on_change (Python) or
// onChange (Node), as examples/kvcache/python/kvserver.py does to drop the
// entries of lost ranges, hears of every range it lost, also when the
// ranges stream broke meanwhile (the sidecar restarted) and the library
// reopened it: the libraries tell gains and losses against the ranges the
// application last heard of, not the stream's own (the first message of
// a reopened stream gains every range held and loses none).
func TestTaskLibrariesReportLossesAcrossARestart(t *testing.T) {
	py := python(t)
	nodeBin := nodeJS(t)
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	defer app.Close()
	sock := filepath.Join(t.TempDir(), "sidecar.sock")
	startSidecar := func(name string) *proc {
		return startAppSidecar(t, name, node.gossipAddr, sock, app.Listener.Addr().String())
	}
	sc := startSidecar("sidecar-1")
	c := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	pyCmd := exec.Command(py, "testdata/follow_ranges.py", sock)
	pyCmd.Env = append(os.Environ(), "PYTHONPATH=../clients/python")
	fs := []*follower{startFollower(t, "Python", pyCmd), startFollower(t, "Node", exec.Command(nodeBin, "testdata/follow_ranges.mjs", sock))}
	for _, f := range fs {
		testwait.Until(t, 30*time.Second, f.lang+" to hold every key", func() bool {
			r := f.report(t)
			return len(r.Owns) == 2000 && len(r.OnChange) == 2000
		})
	}
	// The sidecar dies; while it is away, the job's other task takes
	// the keys; the sidecar comes back and takes about half of them.
	sc.signal(syscall.SIGKILL)
	sc.wait(10 * time.Second)
	startKV(t, "kv-1", node.gossipAddr)
	testwait.Until(t, 30*time.Second, "kv-1 to hold every key", func() bool {
		a := c.Assignment()
		return a != nil && !slices.ContainsFunc(a.Slices, func(s assign.Slice) bool { return slices.Contains(s.Tasks, "app-0") })
	})
	startSidecar("sidecar-2")
	for _, f := range fs {
		var r followReport
		testwait.Until(t, 30*time.Second, f.lang+" to hear the new sidecar's ranges", func() bool {
			r = f.report(t)
			return len(r.Owns) > 0 && len(r.Owns) < 2000
		})
		missed := 0
		for _, i := range r.OnChange {
			if !slices.Contains(r.Owns, i) {
				missed++
			}
		}
		t.Logf("%s after the sidecar restarted: generation %d, owns() holds %d keys, on_change's gains and losses hold %d",
			f.lang, r.Generation, len(r.Owns), len(r.OnChange))
		if missed > 0 {
			t.Errorf("%s: %d keys lost while the stream was down were never reported lost to the on_change callback", f.lang, missed)
		}
	}
}

// The Node library reopens its ranges stream, backing off, when it ends:
// one loop per Task, also when the stream ends with an error (as Connect
// sends one: HTTP 200 and the error in the end-of-stream message, after
// which the response ends too). Here every one of the sidecar's 16
// streams is taken (RESOURCE_EXHAUSTED): the Task backs off, and once the
// streams free up it takes one, leaving the others to other followers.
func TestNodeTaskReopensItsStreamOnce(t *testing.T) {
	nodeBin := nodeJS(t)
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	defer app.Close()
	sock := filepath.Join(t.TempDir(), "sidecar.sock")
	startAppSidecar(t, "sidecar", node.gossipAddr, sock, app.Listener.Addr().String())
	api := localClient(sock)
	// Take the sidecar's 16 streams.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 16 {
		s, err := api.WatchRanges(ctx, connect.NewRequest(&slicerv1.WatchRangesRequest{}))
		if err != nil || !s.Receive() {
			t.Fatalf("stream %d: %v, %v", i, err, s.Err())
		}
	}
	f := startFollower(t, "Node", exec.Command(nodeBin, "testdata/watch_count.mjs", sock))
	var r struct {
		Watches    int
		Error      string
		Generation string
	}
	if !f.lines.Scan() || json.Unmarshal(f.lines.Bytes(), &r) != nil {
		t.Fatalf("the Node task printed %q", f.lines.Text())
	}
	t.Logf("one Node Task, the sidecar's streams all taken: %d WatchRanges requests in 600 ms (%s)", r.Watches, r.Error)
	// One loop backing off from 100 ms makes 4 in 600 ms (at 0, 100, 300
	// and 700 ms); allow some slack.
	if r.Watches > 8 {
		t.Errorf("one Node Task made %d WatchRanges requests in 600 ms; want at most 8 (one loop, backing off)", r.Watches)
	}
	// The streams free up; the Task opens one and hears its ranges.
	cancel()
	testwait.Until(t, 30*time.Second, "the Node Task to hear its ranges", func() bool {
		io.WriteString(f.in, "count\n")
		return f.lines.Scan() && json.Unmarshal(f.lines.Bytes(), &r) == nil && r.Generation != "0"
	})
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	s, err := api.WatchRanges(ctx2, connect.NewRequest(&slicerv1.WatchRangesRequest{}))
	if err == nil && !s.Receive() {
		err = s.Err()
	}
	t.Logf("after the streams freed up: another client's WatchRanges: %v; the Node Task had made %d requests", err, r.Watches)
	if connect.CodeOf(err) == connect.CodeResourceExhausted {
		t.Errorf("with one Node Task following its ranges, another stream is refused: %v", err)
	}
}
