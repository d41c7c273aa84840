package gossip

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slicerd/slicerd/internal/testwait"
)

func delayedNode(t *testing.T, name string, self Peer, delay func(from, to string) time.Duration) *Node {
	t.Helper()
	inner, err := NewNetTransport("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	return testNode(t, name, self, func(c *Config) {
		c.Transport = NewDelayTransport(inner, delay)
		c.ProbeTimeout = 200 * time.Millisecond // above the injected round trip
		c.ReconnectInterval = 200 * time.Millisecond
	})
}

func TestDelayTransportConverges(t *testing.T) {
	var sent, emptyAddr atomic.Int64
	var drop atomic.Bool
	delay := func(from, to string) time.Duration {
		if from == "" || to == "" {
			emptyAddr.Add(1) // memberlist calls this after the test, too
		}
		sent.Add(1)
		if drop.Load() {
			return Drop
		}
		return 20 * time.Millisecond
	}
	a := delayedNode(t, "a", selfAssigner, delay)
	b := delayedNode(t, "b", selfTask, delay)
	if a.GossipAddr() == b.GossipAddr() {
		t.Fatalf("both nodes at %s", a.GossipAddr())
	}
	join(t, b, a)
	testwait.For(t, "the delayed pair to converge", func() bool { return allAlive(a, "a", "b")() && allAlive(b, "a", "b")() })
	if err := b.SetRPCAddr("127.0.0.1:9100"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "a to see b's update through the delay", func() bool { p, _ := peer(a, "b"); return p.RPCAddr == "127.0.0.1:9100" })
	if sent.Load() == 0 || emptyAddr.Load() != 0 {
		t.Fatalf("delay consulted %d times, %d with an empty address", sent.Load(), emptyAddr.Load())
	}

	// A dropped link looks like a failure on both sides.
	drop.Store(true)
	testwait.For(t, "a to see b failed behind the dropped link", hasStatus(a, "b", StatusFailed))
	testwait.For(t, "b to see a failed behind the dropped link", hasStatus(b, "a", StatusFailed))

	// Healed, the two find each other again.
	drop.Store(false)
	testwait.For(t, "the healed pair to see each other alive again", func() bool { return allAlive(a, "a", "b")() && allAlive(b, "a", "b")() })
}

func TestDelayTransportShutdownDiscardsQueued(t *testing.T) {
	// A delay longer than the test: packets stay queued until Shutdown,
	// which must stop the sender goroutine anyway (goleak checks).
	a := delayedNode(t, "a", selfAssigner, func(string, string) time.Duration { return time.Hour })
	b := testNode(t, "b", selfBackup)
	// b's join reaches a over TCP but a's answers are delayed for an hour,
	// so give the join a short life.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = b.RetryJoin(ctx, []string{a.GossipAddr()}, 20*time.Millisecond)
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

func TestStartShutsDownTransportOnFailure(t *testing.T) {
	inner, err := NewNetTransport("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, port, _ := inner.FinalAdvertiseAddr("", 0)
	cfg := TestConfig("") // invalid: no name
	cfg.Transport = NewDelayTransport(inner, func(string, string) time.Duration { return 0 })
	if _, err := Start(cfg); err == nil {
		t.Fatal("Start without a name succeeded")
	}
	// The port is free again, so the transport was shut down.
	again, err := NewNetTransport(net.JoinHostPort(addr.String(), strconv.Itoa(port)), nil)
	if err != nil {
		t.Fatalf("port still bound after a failed Start: %v", err)
	}
	again.Shutdown()
}
