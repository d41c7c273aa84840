package roles

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/batchconn"
	"github.com/slicerd/slicerd/internal/connlimit"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/internal/testwait"
)

// HTTP/2 frame types the tests look for.
const (
	frameSettings = 0x4
	framePing     = 0x6
	frameGoAway   = 0x7
)

// dialH2 opens a raw cleartext HTTP/2 connection from the loopback address
// from ("" = any) and sends the client preface and an empty SETTINGS
// frame, then nothing: the idle connection a flood is made of.
func dialH2(t *testing.T, addr, from string) net.Conn {
	t.Helper()
	c := testnet.DialFrom(t, addr, from)
	preface := append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, frameSettings, 0, 0, 0, 0, 0)
	c.Write(preface) // a refused connection may already be reset; readFrames tells
	return c
}

// readFrames reads frames from c until the connection ends or until stop
// is true of a frame type, and returns the types read and the error that
// ended the reading (nil when stop did).
func readFrames(t *testing.T, c net.Conn, stop func(byte) bool) ([]byte, error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) // bounds a hang; not a timing claim
	defer c.SetReadDeadline(time.Time{})
	var types []byte
	var hdr [9]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return types, err
		}
		n := int(binary.BigEndian.Uint32(append([]byte{0}, hdr[:3]...)))
		if _, err := io.CopyN(io.Discard, c, int64(n)); err != nil {
			return types, err
		}
		types = append(types, hdr[3])
		if stop != nil && stop(hdr[3]) {
			return types, nil
		}
	}
}

// closedByServer reports whether err ended a read because the server
// closed the connection, as opposed to the test's own deadline.
func closedByServer(err error) bool {
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// admitted reads the server's first SETTINGS frame: the connection was
// admitted and is being served.
func admitted(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := readFrames(t, c, func(ft byte) bool { return ft == frameSettings }); err != nil {
		t.Fatalf("connection from %v was not served: %v", c.LocalAddr(), err)
	}
}

// refused checks that the server closed c before serving anything.
func refused(t *testing.T, c net.Conn) {
	t.Helper()
	types, err := readFrames(t, c, nil)
	if len(types) > 0 || !closedByServer(err) {
		t.Fatalf("connection from %v over the limit: read frames %v, then %v; want it closed unserved", c.LocalAddr(), types, err)
	}
}

func conns(r *running) *connlimit.Listener {
	return r.listener.(*batchconn.Listener).Listener.(*connlimit.Listener)
}

func checkHealth(ctx context.Context, hc *http.Client, addr string) (healthv1.HealthCheckResponse_ServingStatus, error) {
	client := connect.NewClient[healthv1.HealthCheckRequest, healthv1.HealthCheckResponse](
		hc, api.RPCURL(addr)+"/grpc.health.v1.Health/Check", connect.WithGRPC())
	resp, err := client.CallUnary(ctx, connect.NewRequest(&healthv1.HealthCheckRequest{}))
	if err != nil {
		return 0, err
	}
	return resp.Msg.GetStatus(), nil
}

// healthFrom checks health over a fresh connection from the loopback
// address from.
func healthFrom(from, addr string) (healthv1.HealthCheckResponse_ServingStatus, error) {
	hc := api.NewH2CClient()
	tr := hc.Transport.(*http.Transport)
	tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return checkHealth(ctx, hc, addr)
}

// The global cap refuses the connection over it, from any address, and
// admits again once one closes.
func TestMaxConnectionsRefusesAndAdmitsAgain(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.MaxConnections, cfg.MaxConnectionsPerIP = 3, 3
	node := startAgent(t, cfg)
	addr := node.RPCAddr()

	var held []net.Conn
	for _, from := range []string{"127.0.0.2", "127.0.0.2", "127.0.0.3"} {
		c := dialH2(t, addr, from)
		admitted(t, c)
		held = append(held, c)
	}
	refused(t, dialH2(t, addr, "127.0.0.4"))
	if status, err := healthFrom("127.0.0.1", addr); err == nil {
		t.Errorf("health check with every connection taken answered %v; want the connection refused", status)
	}
	if got := conns(node).Refused(); got < 2 {
		t.Errorf("Refused() = %d, want at least 2", got)
	}

	held[0].Close()
	testwait.For(t, "the server to release the closed connection", func() bool { return conns(node).Open() == 2 })
	if status, err := healthFrom("127.0.0.1", addr); err != nil || status != healthv1.HealthCheckResponse_SERVING {
		t.Errorf("health check after a connection closed: %v, %v; want SERVING", status, err)
	}
}

// An attacker holding its per-IP share in idle connections does not keep
// a client at another address out: the health check still answers.
func TestMaxConnectionsPerIPKeepsHealthServing(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.MaxConnections, cfg.MaxConnectionsPerIP = 100, 4
	node := startAgent(t, cfg)
	addr := node.RPCAddr()

	for range 4 {
		admitted(t, dialH2(t, addr, "127.0.0.2"))
	}
	refused(t, dialH2(t, addr, "127.0.0.2"))
	if status, err := healthFrom("127.0.0.2", addr); err == nil {
		t.Errorf("health check from the attacker's address answered %v; want the connection refused", status)
	}
	if status, err := healthFrom("127.0.0.1", addr); err != nil || status != healthv1.HealthCheckResponse_SERVING {
		t.Errorf("health check from another address: %v, %v; want SERVING", status, err)
	}
	if got := conns(node).Open(); got < 4 {
		t.Errorf("Open() = %d; the attacker's connections should still be held", got)
	}
}

// startWatched starts a node with a short idle timeout or ping interval
// (set by tune) and a WatchAssignment stream on job kv with one task.
func startWatched(t *testing.T, tune func(*Config)) (*running, *watcher) {
	t.Helper()
	cfg := testConfig(t, "node-1", t.TempDir())
	tune(&cfg)
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	w := watchJob(t, node.RPCAddr(), "kv", false)
	w.until(t, "the first assignment", func(a *assign.Assignment) bool { return slices.Equal(taskNames(a), []string{"t0"}) })
	return node, w
}

// stillWatching checks that w's stream still delivers: a new task reaches it.
func stillWatching(t *testing.T, node *running, w *watcher) {
	t.Helper()
	taskMember(t, "kv", "t1", node.GossipAddr())
	w.until(t, "the assignment with t1", func(a *assign.Assignment) bool {
		return slices.Equal(taskNames(a), []string{"t0", "t1"})
	})
}

// An HTTP/2 connection that sent its preface and nothing else is told to
// go away and closed after the idle timeout; a connection carrying a watch
// stream is not idle and stays. The idle connection is opened after the
// watch, so by the time it is closed the watch's connection has lived
// longer than the idle timeout.
func TestIdleConnectionClosedWatchSurvives(t *testing.T) {
	node, w := startWatched(t, func(c *Config) { c.IdleTimeout = 50 * time.Millisecond })

	c := dialH2(t, node.RPCAddr(), "127.0.0.2")
	types, err := readFrames(t, c, nil)
	if !closedByServer(err) || !slices.Contains(types, frameGoAway) {
		t.Fatalf("idle connection: read frames %v, then %v; want a GOAWAY and the server closing it", types, err)
	}
	stillWatching(t, node, w)
}

// A connection that stops answering pings is closed after the ping
// timeout, while a watch whose client answers them stays. Pings go out
// every 20 ms, but the watch's client gets a second to answer each: on a
// busy machine its transport may not run within tens of milliseconds, and
// the test is about a silent peer, not a slow one.
func TestUnansweredPingClosesConnectionWatchSurvives(t *testing.T) {
	node, w := startWatched(t, func(c *Config) {
		c.PingInterval, c.PingTimeout = 20*time.Millisecond, time.Second
	})

	c := dialH2(t, node.RPCAddr(), "127.0.0.2")
	types, err := readFrames(t, c, nil)
	if !closedByServer(err) || !slices.Contains(types, framePing) || slices.Contains(types, frameGoAway) {
		t.Fatalf("silent connection: read frames %v, then %v; want a PING and the server closing it without GOAWAY", types, err)
	}
	stillWatching(t, node, w)
}

// A connection that never finishes its first request's headers, or never
// sends anything, is closed after the read-header timeout.
func TestReadHeaderTimeoutClosesSilentConnections(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.ReadHeaderTimeout = 50 * time.Millisecond
	node := startAgent(t, cfg)
	for _, first := range []string{"", "POST /grpc.health.v1.Health/Check HTTP/1.1\r\nHost: x\r\n"} {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
		c, err := d.Dial("tcp", node.RPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if first != "" {
			if _, err := io.WriteString(c, first); err != nil {
				t.Fatal(err)
			}
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second)) // bounds a hang; not a timing claim
		// ReadAll returns nil at the server's close (EOF), or its reset.
		if b, err := io.ReadAll(c); err != nil && !closedByServer(err) {
			t.Errorf("after %q: the server did not close the connection: read %q, %v", first, b, err)
		}
	}
}

func TestMaxStartingHandlers(t *testing.T) {
	if got := maxStartingHandlers(7); got != 7 {
		t.Errorf("configured 7: %d", got)
	}
	if got, want := maxStartingHandlers(0), max(64, 32*runtime.GOMAXPROCS(0)); got != want {
		t.Errorf("default: %d; want %d", got, want)
	}
}

// A call whose request body never ends is ended after the read-header
// timeout, over HTTP/2 and over HTTP/1.1: its caller gets an error while
// it still holds the body open, so that calls stalled in their bodies
// (2,000 on each HTTP/2 connection, a health check needing no identity)
// cannot pile up handlers. Watches, whose requests were read in full, live
// on past that timeout, over HTTP/2 and over HTTP/1.1.
func TestStalledRequestBodyEnded(t *testing.T) {
	node, w := startWatched(t, func(c *Config) { c.ReadHeaderTimeout = 100 * time.Millisecond })
	hc1 := http1Client()
	defer hc1.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := slicerv1connect.NewDistributorServiceClient(hc1, api.RPCURL(node.RPCAddr()), connect.WithProtoJSON()).
		WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("WatchAssignment over HTTP/1.1 ended: %v", stream.Err())
	}

	for _, c := range []struct {
		proto string
		hc    *http.Client
	}{{"HTTP/2", api.NewH2CClient()}, {"HTTP/1.1", http1Client()}} {
		stalledCallEnds(t, c.proto, c.hc, node.RPCAddr())
		c.hc.CloseIdleConnections()
	}

	// Each stalled call ended a read-header timeout after it started,
	// after the watches had started.
	stillWatching(t, node, w)
	for {
		if !stream.Receive() {
			t.Fatalf("WatchAssignment over HTTP/1.1 ended once it had lived past the read-header timeout: %v", stream.Err())
		}
		a, err := api.FromProto(stream.Msg().GetAssignment())
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(taskNames(a), []string{"t0", "t1"}) {
			break
		}
	}
}

// stalledCallEnds starts a health check, sends the first byte of its body
// and no more, and wants an error answer while the body is still open.
func stalledCallEnds(t *testing.T, proto string, hc *http.Client, addr string) {
	t.Helper()
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte("{"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // bounds a hang; not a timing claim
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api.RPCURL(addr)+"/grpc.health.v1.Health/Check", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("a call stalled in its body over %s got no answer: %v", proto, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("a call stalled in its body over %s: %d %s; want an error", proto, resp.StatusCode, body)
	}
}

// A call stalled in its body whose caller does not take the answer either
// (it gives the server no flow-control window for it) is reset once the
// answer could not be sent within the read-header timeout, so that its
// handler does not wait for the window forever.
func TestStalledRequestBodyUnreadAnswerReset(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.ReadHeaderTimeout = 100 * time.Millisecond
	node := startAgent(t, cfg)
	c := testnet.DialFrom(t, node.RPCAddr(), "")
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", node.RPCAddr()},
		{":path", "/grpc.health.v1.Health/Check"}, {"content-type", "application/json"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, false, []byte("{")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) // bounds a hang; not a timing claim
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the stalled call's stream was not reset: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return
			}
		case *http2.GoAwayFrame:
			t.Fatalf("the server went away (%v) instead of resetting the stalled call's stream", f.ErrCode)
		}
	}
}
