package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/internal/testwait"
)

// localClient is a SidecarService client over the sidecar's Unix socket.
func localClient(path string) slicerv1connect.SidecarServiceClient {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: protocols, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return slicerv1connect.NewSidecarServiceClient(&http.Client{Transport: tr}, "http://sidecar")
}

// owns reports whether ranges hold slice key h.
func owns(ranges []*slicerv1.KeyRange, h assign.SliceKey) bool {
	return slices.ContainsFunc(ranges, func(r *slicerv1.KeyRange) bool { return r.GetStart() <= h && h < r.GetEnd() })
}

// An application in any language follows its task through the sidecar's
// local API: the ranges it streams are exactly the keys the assignment
// gives the task (checked key by key against a Clerk at the same
// generation), a drain it asks for moves every key away and its end
// brings keys back, and invalid load is refused. The socket is the
// sidecar's user's alone.
func TestSidecarLocalAPI(t *testing.T) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	defer app.Close()
	appAddr := app.Listener.Addr().String()
	startKV(t, "kv-1", node.gossipAddr)
	sock := filepath.Join(t.TempDir(), "sidecar.sock")
	args := []string{"sidecar", "--job", "kv", "--task", "app-0", "--app-addr", appAddr, "--join", node.gossipAddr,
		"--health-interval", "200ms", "--drain-timeout", "10s", "--local-api-socket", sock}
	sc := startEnv(t, "sidecar", bin.slicerd, append(append(os.Environ(), "SLICERD_LOG_FORMAT=json"), secureEnv(bin.slicerd, args)...), args...)
	sc.waitLine(30*time.Second, "sidecar local API serving")
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("local API socket: %v, %v; want a socket of mode 0600", fi.Mode(), err)
	}
	c := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	api := localClient(sock)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := api.WatchRanges(ctx, connect.NewRequest(&slicerv1.WatchRangesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan *slicerv1.WatchRangesResponse, 64)
	go func() {
		defer close(msgs)
		for stream.Receive() {
			msgs <- stream.Msg()
		}
	}()
	// next returns the first message for which cond holds.
	next := func(what string, cond func(*slicerv1.WatchRangesResponse) bool) *slicerv1.WatchRangesResponse {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("the ranges stream ended waiting for %s: %v", what, stream.Err())
				}
				if cond(m) {
					return m
				}
			case <-deadline:
				t.Fatalf("no ranges message with %s within 30s", what)
			}
		}
	}
	// agrees checks the message's ranges key by key against the Clerk's
	// assignment of the same generation.
	agrees := func(m *slicerv1.WatchRangesResponse) {
		t.Helper()
		testwait.Until(t, 10*time.Second, fmt.Sprintf("the Clerk to hold generation %d", m.GetGeneration()), func() bool {
			a := c.Assignment()
			return a != nil && a.Generation >= m.GetGeneration()
		})
		a := c.Assignment()
		if a.Generation != m.GetGeneration() {
			return // moved on meanwhile; the next message is checked
		}
		for i := range 2000 {
			key := fmt.Sprintf("key-%d", i)
			h := assign.HashString(key)
			s := a.Slices[slices.IndexFunc(a.Slices, func(s assign.Slice) bool { return s.Start <= h && h < s.End })]
			if want := slices.Contains(s.Tasks, "app-0"); owns(m.GetOwned(), h) != want {
				t.Fatalf("generation %d: the local API says app-0 holds %q: %v; the assignment: %v", m.GetGeneration(), key, !want, want)
			}
		}
	}
	first := next("ranges held", func(m *slicerv1.WatchRangesResponse) bool { return len(m.GetOwned()) > 0 })
	agrees(first)
	t.Logf("generation %d: app-0 holds %d ranges", first.GetGeneration(), len(first.GetOwned()))

	start := time.Now()
	if _, err := api.SetDraining(ctx, connect.NewRequest(&slicerv1.SetDrainingRequest{Draining: true})); err != nil {
		t.Fatalf("SetDraining(true): %v", err)
	}
	drained := next("every range lost", func(m *slicerv1.WatchRangesResponse) bool { return len(m.GetOwned()) == 0 && len(m.GetLost()) > 0 })
	agrees(drained)
	t.Logf("drain asked: every range lost %v later, generation %d", time.Since(start).Round(time.Millisecond), drained.GetGeneration())
	// The health checks pass meanwhile; the drain holds.
	time.Sleep(time.Second) // a second of passing health checks (200 ms apart), which must not end the drain
	if owned := c.Assignment(); slices.ContainsFunc(owned.Slices, func(s assign.Slice) bool { return slices.Contains(s.Tasks, "app-0") }) {
		t.Fatal("app-0 holds keys again while the application's drain holds")
	}
	if _, err := api.SetDraining(ctx, connect.NewRequest(&slicerv1.SetDrainingRequest{Draining: false})); err != nil {
		t.Fatalf("SetDraining(false): %v", err)
	}
	back := next("ranges gained again", func(m *slicerv1.WatchRangesResponse) bool { return len(m.GetGained()) > 0 })
	agrees(back)

	if _, err := api.ReportLoad(ctx, connect.NewRequest(&slicerv1.SidecarServiceReportLoadRequest{Loads: []*slicerv1.KeyLoad{{Key: []byte("k"), Cost: 1}}})); err != nil {
		t.Fatalf("ReportLoad: %v", err)
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		_, err := api.ReportLoad(ctx, connect.NewRequest(&slicerv1.SidecarServiceReportLoadRequest{Loads: []*slicerv1.KeyLoad{{Key: []byte("k"), Cost: 1}, {Key: []byte("k"), Cost: bad}}}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("ReportLoad with cost %v = %v; want INVALID_ARGUMENT", bad, err)
		}
	}
	var ce *connect.Error
	if _, err := api.ReportLoad(ctx, connect.NewRequest(&slicerv1.SidecarServiceReportLoadRequest{Loads: make([]*slicerv1.KeyLoad, 10_001)})); !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		t.Errorf("ReportLoad of 10,001 loads = %v; want INVALID_ARGUMENT", err)
	}
	cancel()
	sc.signal(syscall.SIGTERM)
	if code := sc.wait(20 * time.Second); code != 0 {
		t.Fatalf("sidecar exited %d", code)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket is still there after the sidecar stopped: %v", err)
	}
}
