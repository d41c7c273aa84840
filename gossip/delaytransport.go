package gossip

import (
	"container/heap"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Drop, returned by a delay function, discards packets and refuses stream
// dials on that link: a partition.
const Drop time.Duration = -1

// NewNetTransport binds memberlist's real UDP/TCP transport on bindAddr
// (IP:port; port 0 picks a free port for both protocols), logging through
// logger. Use it as the inner transport of NewDelayTransport.
func NewNetTransport(bindAddr string, logger *slog.Logger) (*memberlist.NetTransport, error) {
	host, port, err := splitIPPort("bind address", bindAddr)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	t, err := bindNetTransport(host, port, logger)
	if err != nil {
		return nil, fmt.Errorf("gossip: bind %s: %w", bindAddr, err)
	}
	return t, nil
}

func bindNetTransport(host string, port int, logger *slog.Logger) (*memberlist.NetTransport, error) {
	cfg := &memberlist.NetTransportConfig{
		BindAddrs: []string{host},
		BindPort:  port,
		Logger:    log.New(&logWriter{logger: logger, component: "memberlist"}, "", 0),
	}
	// With port 0 the kernel picks a free TCP port, which may be taken for
	// UDP; memberlist retries the same way for its own transport. Any
	// error is retried: memberlist formats the bind error with %v, so
	// neither errors.Is(err, syscall.EADDRINUSE) nor a type can single
	// out the port clash, and an error that persists is returned after
	// the last attempt anyway.
	attempts := 1
	if port == 0 {
		attempts = 10
	}
	for i := 1; ; i++ {
		t, err := memberlist.NewNetTransport(cfg)
		if err == nil || i >= attempts {
			return t, err
		}
	}
}

// NewDelayTransport wraps a transport so that what this member sends is
// delayed by delay(from, to), where from is this member's advertised gossip
// address and to the destination's. A negative result (Drop) discards
// packets and fails stream dials. Delays apply at the sender: wrap every
// member's transport to model a network. Packets keep their send time for
// RTT measurement, so probes see the added latency.
//
// Streams are delayed once when dialled, and on every turn of the
// conversation: each write waits delay(from, to) and the first read after a
// write waits delay(to, from). The wrapper starts one goroutine, on the
// first delayed packet, and stops it in Shutdown (which memberlist calls
// when the node shuts down); delayed packets still queued are discarded.
// delay is called from memberlist's goroutines and must be safe for
// concurrent use.
func NewDelayTransport(inner memberlist.NodeAwareTransport, delay func(from, to string) time.Duration) memberlist.NodeAwareTransport {
	return &delayTransport{
		inner: inner,
		delay: delay,
		wake:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
	}
}

type delayTransport struct {
	inner memberlist.NodeAwareTransport
	delay func(from, to string) time.Duration
	self  atomic.Pointer[string] // advertised address, learned from FinalAdvertiseAddr

	mu      sync.Mutex
	queue   packetQueue
	started bool
	stopped bool
	seq     uint64

	wake     chan struct{}
	stop     chan struct{}
	wg       sync.WaitGroup
	stopOnce sync.Once
}

var errLinkDown = errors.New("gossip: delay transport: link dropped")

func (t *delayTransport) from() string {
	if p := t.self.Load(); p != nil {
		return *p
	}
	return ""
}

// FinalAdvertiseAddr implements memberlist.Transport and records the
// address this member advertises, the "from" of every delay.
func (t *delayTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	addr, p, err := t.inner.FinalAdvertiseAddr(ip, port)
	if err == nil {
		s := net.JoinHostPort(addr.String(), strconv.Itoa(p))
		t.self.Store(&s)
	}
	return addr, p, err
}

// WriteTo implements memberlist.Transport.
func (t *delayTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *delayTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	d := t.delay(t.from(), addr.Addr)
	switch {
	case d < 0:
		return time.Now(), nil // lost on the wire, as UDP would be
	case d == 0:
		return t.inner.WriteToAddress(b, addr)
	}
	now := time.Now()
	p := &delayedPacket{due: now.Add(d), buf: append([]byte(nil), b...), addr: addr}
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return now, nil
	}
	if !t.started {
		t.started = true
		t.wg.Add(1)
		go t.run()
	}
	t.seq++
	p.seq = t.seq
	heap.Push(&t.queue, p)
	first := t.queue[0] == p
	t.mu.Unlock()
	if first {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
	return now, nil
}

// run sends queued packets when they fall due.
func (t *delayTransport) run() {
	defer t.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		t.mu.Lock()
		var ready []*delayedPacket
		now := time.Now()
		for len(t.queue) > 0 && !t.queue[0].due.After(now) {
			ready = append(ready, heap.Pop(&t.queue).(*delayedPacket))
		}
		wait := time.Hour
		if len(t.queue) > 0 {
			wait = t.queue[0].due.Sub(now)
		}
		t.mu.Unlock()
		for _, p := range ready {
			_, _ = t.inner.WriteToAddress(p.buf, p.addr) // best effort, like UDP
		}
		if len(ready) > 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-t.stop:
			return
		case <-t.wake:
		case <-timer.C:
		}
	}
}

// PacketCh implements memberlist.Transport.
func (t *delayTransport) PacketCh() <-chan *memberlist.Packet { return t.inner.PacketCh() }

// StreamCh implements memberlist.Transport.
func (t *delayTransport) StreamCh() <-chan net.Conn { return t.inner.StreamCh() }

// DialTimeout implements memberlist.Transport.
func (t *delayTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *delayTransport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	from := t.from()
	d := t.delay(from, addr.Addr)
	if d < 0 {
		return nil, fmt.Errorf("dial %s: %w", addr.Addr, errLinkDown)
	}
	if d >= timeout {
		if err := t.sleep(timeout); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("dial %s: i/o timeout (link delay %v)", addr.Addr, d)
	}
	if err := t.sleep(d); err != nil {
		return nil, err
	}
	conn, err := t.inner.DialAddressTimeout(addr, timeout-d)
	if err != nil {
		return nil, err
	}
	return &delayConn{Conn: conn, t: t, from: from, to: addr.Addr}, nil
}

// sleep waits d, or fails when the transport shuts down.
func (t *delayTransport) sleep(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-t.stop:
		return net.ErrClosed
	}
}

// Shutdown implements memberlist.Transport: it stops the sender goroutine,
// discards queued packets and shuts the inner transport down.
func (t *delayTransport) Shutdown() error {
	t.stopOnce.Do(func() {
		t.mu.Lock()
		t.stopped = true
		t.queue = nil
		t.mu.Unlock()
		close(t.stop)
		t.wg.Wait()
	})
	return t.inner.Shutdown()
}

// delayConn delays each turn of a stream conversation.
type delayConn struct {
	net.Conn
	t        *delayTransport
	from, to string
	wrote    atomic.Bool // a write happened since the last delayed read
}

func (c *delayConn) Write(b []byte) (int, error) {
	d := c.t.delay(c.from, c.to)
	if d < 0 {
		return 0, fmt.Errorf("write to %s: %w", c.to, errLinkDown)
	}
	if err := c.t.sleep(d); err != nil {
		return 0, err
	}
	c.wrote.Store(true)
	return c.Conn.Write(b)
}

func (c *delayConn) Read(b []byte) (int, error) {
	if c.wrote.Swap(false) {
		d := c.t.delay(c.to, c.from)
		if d < 0 {
			return 0, fmt.Errorf("read from %s: %w", c.to, errLinkDown)
		}
		if err := c.t.sleep(d); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(b)
}

type delayedPacket struct {
	due  time.Time
	seq  uint64 // keeps equal-due packets in send order
	buf  []byte
	addr memberlist.Address
}

// packetQueue is a min-heap of packets by due time.
type packetQueue []*delayedPacket

func (q packetQueue) Len() int { return len(q) }
func (q packetQueue) Less(i, j int) bool {
	if q[i].due.Equal(q[j].due) {
		return q[i].seq < q[j].seq
	}
	return q[i].due.Before(q[j].due)
}
func (q packetQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *packetQueue) Push(x any)   { *q = append(*q, x.(*delayedPacket)) }
func (q *packetQueue) Pop() any {
	old := *q
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return p
}
