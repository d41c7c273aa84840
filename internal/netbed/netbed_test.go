package netbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Every goroutine a test starts (clients, servers, process watchers) is
// stopped and waited for by the end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bed returns a bed of the named hosts, removed at the end of the test,
// or skips the test where namespaces cannot be made.
func bed(t *testing.T, names ...string) *Bed {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	b, err := New(context.Background(), "slicerd-netbedtest", names...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// echo serves TCP on h, answering each connection with h's name, and
// UDP, counting the datagrams that arrive, until the test ends.
func echo(t *testing.T, h *Host) (tcp string, udp *net.UDPConn) {
	t.Helper()
	ln, err := h.Listen("tcp", h.AddrPort(7000))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, h.Name)
			c.Close()
		}
	}()
	var pc net.PacketConn
	err = h.in(func() error {
		var err error
		pc, err = net.ListenPacket("udp", h.AddrPort(7001))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); pc.Close(); <-done })
	return ln.Addr().String(), pc.(*net.UDPConn)
}

// reach reports whether from can open a TCP connection to to's echo
// server and read its name.
func reach(from, to *Host) error {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	c, err := from.DialContext(ctx, "tcp", to.AddrPort(7000))
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if string(b) != to.Name {
		return fmt.Errorf("%s answered %q, want its name", to.Name, b)
	}
	return nil
}

// datagram reports whether a UDP datagram from from arrives at to.
func datagram(t *testing.T, from, to *Host, udp map[*Host]*net.UDPConn) bool {
	t.Helper()
	c, err := from.DialContext(context.Background(), "udp", to.AddrPort(7001))
	if err != nil {
		return false // a blackhole route refuses the connect
	}
	defer c.Close()
	msg := fmt.Sprintf("%s-%d", from.Name, time.Now().UnixNano())
	c.Write([]byte(msg)) // a blackholed send fails here: the datagram is lost
	buf := make([]byte, 64)
	udp[to].SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	for {
		n, _, err := udp[to].ReadFrom(buf)
		if err != nil {
			return false
		}
		if string(buf[:n]) == msg {
			return true
		}
	}
}

func TestHostsReachEachOtherAndPartitionsCut(t *testing.T) {
	b := bed(t, "a", "b", "c")
	a, bb, c := b.Host("a"), b.Host("b"), b.Host("c")
	if !b.Prefix().Contains(a.Addr) || a.Addr == bb.Addr {
		t.Fatalf("addresses %v, %v outside %v or equal", a.Addr, bb.Addr, b.Prefix())
	}
	udp := map[*Host]*net.UDPConn{}
	for _, h := range b.Hosts {
		_, udp[h] = echo(t, h)
	}
	all := func(want bool, why string) {
		t.Helper()
		for _, f := range b.Hosts {
			for _, to := range b.Hosts {
				if err := reach(f, to); (err == nil) != want {
					t.Errorf("%s: %s → %s: %v", why, f, to, err)
				}
			}
		}
	}
	all(true, "a new bed")

	ctx := context.Background()
	if err := b.Partition(ctx, []*Host{a}, []*Host{bb}); err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]*Host{{a, bb}, {bb, a}} {
		if err := reach(p[0], p[1]); err == nil {
			t.Errorf("partitioned: %s reached %s", p[0], p[1])
		}
		if datagram(t, p[0], p[1], udp) {
			t.Errorf("partitioned: a datagram from %s reached %s", p[0], p[1])
		}
	}
	for _, p := range [][2]*Host{{a, c}, {c, a}, {bb, c}, {c, bb}, {a, a}} {
		if err := reach(p[0], p[1]); err != nil {
			t.Errorf("outside the partition: %s → %s: %v", p[0], p[1], err)
		}
	}
	if err := b.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	all(true, "healed")

	// One way: a cannot send to c; c's datagrams still reach a.
	if err := b.Block(ctx, []*Host{a}, []*Host{c}); err != nil {
		t.Fatal(err)
	}
	if datagram(t, a, c, udp) {
		t.Error("one-way: a datagram from a reached c")
	}
	if !datagram(t, c, a, udp) {
		t.Error("one-way: a datagram from c did not reach a")
	}
	if err := b.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if !datagram(t, a, c, udp) {
		t.Error("healed: a datagram from a did not reach c")
	}

	if err := b.LinkDown(ctx, c); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*Host{a, bb} {
		if err := reach(f, c); err == nil {
			t.Errorf("link down: %s reached c", f)
		}
	}
	if err := b.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	all(true, "link up again")
}

// Close kills what runs on the hosts and removes every namespace; a new
// bed sweeps the namespaces of a dead creator.
func TestCloseAndSweepRemoveEverything(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	const prefix = "slicerd-netbedtest"
	b, err := New(ctx, prefix, "x", "y")
	if err != nil {
		t.Fatal(err)
	}
	cmd := b.Host("x").Command(ctx, "sleep", "600")
	if err := cmd.Start(); err != nil {
		b.Close()
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the process on x outlived Close")
	}
	for _, ns := range []string{b.Host("x").NS, b.Host("y").NS, b.sw} {
		if _, err := os.Stat(netnsDir + "/" + ns); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s left after Close: %v", ns, err)
		}
	}

	// A leftover of a dead creator: a pid above the kernel's maximum.
	dead := fmt.Sprintf("%s-%d-h1", prefix, 1<<23)
	if err := ip(ctx, "netns", "add", dead); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { remove(context.Background(), dead) })
	b2, err := New(ctx, prefix, "z")
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if _, err := os.Stat(netnsDir + "/" + dead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead creator's namespace %s was not swept: %v", dead, err)
	}
	if !strings.HasPrefix(b2.Host("z").NS, fmt.Sprintf("%s-%d-", prefix, os.Getpid())) {
		t.Errorf("namespace %q does not carry the creator's pid", b2.Host("z").NS)
	}
}
