package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// notifySocket is a unixgram socket standing in for systemd's
// NOTIFY_SOCKET: every datagram received arrives on msgs, in order.
type notifySocket struct {
	path string
	conn *net.UnixConn
	msgs chan string
}

// endMarker is sent by the test itself: the socket keeps datagrams in
// order, so once it arrives every earlier notification has too.
const endMarker = "TEST_END=1"

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen on %s: %v", path, err)
	}
	s := &notifySocket{path: path, conn: conn, msgs: make(chan string, 1024)}
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(s.msgs)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			s.msgs <- string(buf[:n])
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-read
	})
	return s
}

// next returns the next notification, failing the test when none comes
// within a generous deadline.
func (s *notifySocket) next(t *testing.T, what string) string {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	select {
	case m, ok := <-s.msgs:
		if !ok {
			t.Fatalf("notify socket closed while waiting for %s", what)
		}
		return m
	case <-deadline.C:
		t.Fatalf("no notification within 30s while waiting for %s", what)
	}
	return ""
}

// rest returns every notification sent so far, up to the end marker.
func (s *notifySocket) rest(t *testing.T) []string {
	t.Helper()
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: s.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Write([]byte(endMarker))
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for {
		m := s.next(t, "the end marker")
		if m == endMarker {
			return msgs
		}
		msgs = append(msgs, m)
	}
}

// healthCheck calls the gRPC health service at addr over Connect's JSON
// protocol and returns its status.
func healthCheck(t *testing.T, addr string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Post("http://"+addr+"/grpc.health.v1.Health/Check", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("health check of %s: %v", addr, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.Status + " " + string(body)
}

// TestSystemdNotify runs the agent as a Type=notify unit with a watchdog
// would: READY=1 comes once it serves, with the RPC address in STATUS=,
// keep-alives follow at half the watchdog interval, and STOPPING=1 comes
// when shutdown begins, with no keep-alive after it.
func TestSystemdNotify(t *testing.T) {
	sock := listenNotify(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	t.Setenv("NOTIFY_SOCKET", sock.path)
	t.Setenv("WATCHDOG_USEC", "100000") // keep-alives every 50ms
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := newLineWriter()
	exit := make(chan int, 1)
	args := []string{"slicerd", "--node-name", "n1", "--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
		"--gossip-profile", "local", "--startup-grace", "10ms", "--data-dir", t.TempDir(), "--log-level", "debug"}
	go func() { exit <- runContext(ctx, args, logs, logs) }()
	exitCode := sync.OnceValue(func() int { return <-exit })
	defer func() {
		cancel()
		exitCode()
	}()

	ready := sock.next(t, "READY=1")
	// The agent logs that it serves before it lets READY=1 go.
	if !strings.Contains(logs.String(), `msg="slicerd ready"`) {
		t.Errorf("READY=1 came before the agent logged that it serves; log:\n%s", logs.String())
	}
	lines := strings.Split(ready, "\n")
	if len(lines) != 2 || lines[0] != "READY=1" || !strings.HasPrefix(lines[1], "STATUS=serving assigner,distributor,backup on 127.0.0.1:") {
		t.Fatalf("first notification %q; want READY=1 and STATUS=serving assigner,distributor,backup on 127.0.0.1:PORT", ready)
	}
	addr := lines[1][strings.LastIndex(lines[1], " ")+1:]
	if got := healthCheck(t, addr); got != `200 OK {"status":"SERVING_STATUS_SERVING"}` {
		t.Errorf("health check of %s right after READY=1: %s; want SERVING", addr, got)
	}

	for i := range 3 {
		if m := sock.next(t, "WATCHDOG=1"); m != "WATCHDOG=1" {
			t.Fatalf("notification %d after READY=1 is %q; want WATCHDOG=1", i+1, m)
		}
	}

	cancel()
	for m := sock.next(t, "STOPPING=1"); !strings.HasPrefix(m, "STOPPING=1\n"); m = sock.next(t, "STOPPING=1") {
		if m != "WATCHDOG=1" {
			t.Fatalf("got %q while waiting for STOPPING=1", m)
		}
	}
	if code := exitCode(); code != 0 {
		t.Errorf("slicerd exited %d:\n%s", code, logs.String())
	}
	if after := sock.rest(t); len(after) != 0 {
		t.Errorf("notifications after STOPPING=1: %q; want none", after)
	}
	if !strings.Contains(logs.String(), `msg="notified systemd" component=systemd state="READY=1`) {
		t.Errorf("no debug line about READY=1; log:\n%s", logs.String())
	}
}

func TestWatchdogInterval(t *testing.T) {
	self, other := strconv.Itoa(os.Getpid()), strconv.Itoa(os.Getpid()+1)
	for _, tc := range []struct {
		usec, pid string
		want      time.Duration
	}{
		{"30000000", self, 30 * time.Second},
		{"30000000", "", 30 * time.Second}, // systemd leaves WATCHDOG_PID out at times
		{"30000000", other, 0},             // the watchdog of a parent, say
		{"", self, 0},
		{"soon", self, 0},
		{"-5", self, 0},
	} {
		t.Setenv("WATCHDOG_USEC", tc.usec)
		t.Setenv("WATCHDOG_PID", tc.pid)
		if got := watchdogInterval(slog.New(slog.DiscardHandler)); got != tc.want {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: %v; want %v", tc.usec, tc.pid, got, tc.want)
		}
	}
}

// fakeAgent is an agentState driven by the test; its Check fails its
// first fails calls.
type fakeAgent struct {
	ready, shuttingDown chan struct{}
	fails               int64
	checked             atomic.Int64
}

func newFakeAgent() *fakeAgent {
	return &fakeAgent{ready: make(chan struct{}), shuttingDown: make(chan struct{})}
}

func (a *fakeAgent) Ready() <-chan struct{}        { return a.ready }
func (a *fakeAgent) ShuttingDown() <-chan struct{} { return a.shuttingDown }
func (a *fakeAgent) Check() error {
	if a.checked.Add(1) <= a.fails {
		return errors.New("not serving")
	}
	return nil
}

// TestSystemdWatchdogFollowsCheck: a keep-alive goes only when the agent's
// Check passes, so systemd restarts a node that stays unhealthy.
func TestSystemdWatchdogFollowsCheck(t *testing.T) {
	sock := listenNotify(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	t.Setenv("NOTIFY_SOCKET", sock.path)
	t.Setenv("WATCHDOG_USEC", "2000")
	t.Setenv("WATCHDOG_PID", "")
	agent := newFakeAgent()
	agent.fails = 5
	stop := startSystemdNotify(agent, "serving", slog.New(slog.DiscardHandler))
	defer stop()
	close(agent.ready)
	if m := sock.next(t, "READY=1"); m != "READY=1\nSTATUS=serving" {
		t.Fatalf("first notification %q; want READY=1", m)
	}
	if m := sock.next(t, "WATCHDOG=1"); m != "WATCHDOG=1" {
		t.Fatalf("notification %q; want WATCHDOG=1", m)
	}
	if n := agent.checked.Load(); n <= agent.fails {
		t.Errorf("a keep-alive went after %d checks, of which the first %d failed", n, agent.fails)
	}
}

// Without NOTIFY_SOCKET nothing is started and nothing is asked of the
// agent.
func TestSystemdNotifyOutsideSystemd(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "1000")
	agent := newFakeAgent()
	stop := startSystemdNotify(agent, "serving", slog.New(slog.DiscardHandler))
	close(agent.ready)
	stop()
	if n := agent.checked.Load(); n != 0 {
		t.Errorf("checked the agent %d times outside systemd", n)
	}
}
