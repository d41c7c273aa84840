package roles

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

// TestAssignerWaitsOutStoreOutageAtStart: an Assigner whose etcd goes away
// between opening the store and its first read keeps running, and takes
// its jobs up once etcd is back.
func TestAssignerWaitsOutStoreOutageAtStart(t *testing.T) {
	srv := etcdtest.Start(t)
	cfg := testConfig(t, "assigner-1", "", gossip.RoleAssigner, gossip.RoleDistributor)
	cfg.Store = "etcd://" + srv.Endpoint() + "/outage"
	retries := &countingHandler{Handler: cfg.Logger.Handler(), msg: "the store does not answer", n: new(atomic.Int64)}
	cfg.Logger = slog.New(retries)
	a, err := New(context.Background(), cfg) // opens the store while etcd is up
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Agent: a, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })

	testwait.For(t, "the assigner to retry its first read of the store", func() bool { return retries.n.Load() > 0 })
	select {
	case err := <-r.done:
		r.done <- err
		t.Fatalf("the agent stopped while etcd was down: %v", err)
	default:
	}
	srv.Restart()
	taskMember(t, "kv", "t0", a.GossipAddr())
	seesTask(t, r, "kv", "t0")
	w := watchJob(t, a.RPCAddr(), "kv", false)
	w.until(t, "an assignment once etcd is back", hasTasks("t0"))
}

// countingHandler counts the records whose message starts with msg and
// passes every record on to the handler it wraps.
type countingHandler struct {
	slog.Handler
	msg string
	n   *atomic.Int64
}

// Enabled lets every record through to Handle, so records are counted
// even when the wrapped handler discards them (tests not run with -v).
func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.msg) {
		h.n.Add(1)
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h *countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &countingHandler{Handler: h.Handler.WithAttrs(attrs), msg: h.msg, n: h.n}
}

func (h *countingHandler) WithGroup(name string) slog.Handler {
	return &countingHandler{Handler: h.Handler.WithGroup(name), msg: h.msg, n: h.n}
}

// TestNewHonoursContext: New opens an etcd store under the caller's
// context, so a node told to stop while its etcd does not answer (Ctrl-C
// at start) gives up with that reason instead of waiting out the dial.
func TestNewHonoursContext(t *testing.T) {
	srv := etcdtest.Start(t)
	srv.Stop() // nothing answers at this endpoint any more
	cfg := testConfig(t, "assigner-1", "", gossip.RoleAssigner)
	cfg.Store = "etcd://" + srv.Endpoint() + "/cancelled"
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a, err := New(ctx, cfg)
	if err == nil {
		a.closeStore()
		t.Fatal("New opened a store whose etcd is down under a cancelled context")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("New = %v, want it to name the cancelled context", err)
	}
}
