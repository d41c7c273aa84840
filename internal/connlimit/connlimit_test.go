package connlimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a Listener on 127.0.0.1 whose admitted connections arrive on
// accepted; its accept loop stops at cleanup.
type server struct {
	*Listener
	accepted chan net.Conn
}

func serve(t *testing.T, lim Limits) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{Listener: Wrap(ln, lim), accepted: make(chan net.Conn, 64)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			s.accepted <- c
		}
	}()
	t.Cleanup(func() {
		s.Close()
		wg.Wait()
		close(s.accepted)
		for c := range s.accepted {
			c.Close()
		}
	})
	return s
}

// dial connects from the loopback address from (any when empty).
func dial(t *testing.T, addr, from string) net.Conn { return testnet.DialFrom(t, addr, from) }

// admitted waits for the server to hand over the next admitted connection.
func (s *server) admitted(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-s.accepted:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no connection admitted")
		return nil
	}
}

// refused checks that the server closed c without admitting it: the client
// reads end-of-stream (or a reset) while nothing new is admitted.
func (s *server) refused(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a bound on a hang, not a timing claim
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("connection over the limit was not closed by the server: read returned %v", err)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		t.Logf("refused connection read: %v", err) // a reset is a refusal too
	}
	select {
	case c := <-s.accepted:
		t.Fatalf("a connection from %v was admitted over the limit", c.RemoteAddr())
	default:
	}
}

func TestMaxRefusesAndAdmitsAgain(t *testing.T) {
	s := serve(t, Limits{Max: 3, MaxPerIP: 3})
	addr := s.Addr().String()
	var held []net.Conn
	for range 3 {
		dial(t, addr, "")
		held = append(held, s.admitted(t))
	}
	s.refused(t, dial(t, addr, ""))
	s.refused(t, dial(t, addr, "127.0.0.2")) // the global cap holds for every address
	if got := s.Refused(); got != 2 {
		t.Errorf("Refused() = %d, want 2", got)
	}

	held[0].Close()
	held[0].Close() // a second close must not free a second place
	dial(t, addr, "")
	s.admitted(t)
	s.refused(t, dial(t, addr, ""))
	if got := s.Open(); got != 3 {
		t.Errorf("Open() = %d, want 3", got)
	}
}

func TestMaxPerIP(t *testing.T) {
	s := serve(t, Limits{Max: 10, MaxPerIP: 2})
	addr := s.Addr().String()
	var attacker []net.Conn
	for range 2 {
		dial(t, addr, "127.0.0.2")
		attacker = append(attacker, s.admitted(t))
	}
	s.refused(t, dial(t, addr, "127.0.0.2"))

	// Another address still gets its own share.
	for range 2 {
		dial(t, addr, "127.0.0.1")
		s.admitted(t)
	}
	s.refused(t, dial(t, addr, "127.0.0.1"))

	attacker[1].Close()
	dial(t, addr, "127.0.0.2")
	s.admitted(t)
	if got := s.Refused(); got != 2 {
		t.Errorf("Refused() = %d, want 2", got)
	}
}

// records collects log records.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) attrs(i int) map[string]slog.Value {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]slog.Value{}
	r.recs[i].Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value
		return true
	})
	return m
}

func (r *records) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.recs)
}

// A burst of refusals writes one line at once, and the next line, once
// the interval has passed, counts the refusals in between.
func TestRefusalsLogRateLimited(t *testing.T) {
	var logs records
	s := serve(t, Limits{Max: 1, MaxPerIP: 1, LogInterval: time.Hour, Logger: slog.New(&logs)})
	addr := s.Addr().String()
	dial(t, addr, "")
	s.admitted(t)
	for range 5 {
		s.refused(t, dial(t, addr, ""))
	}
	if n := logs.len(); n != 1 {
		t.Fatalf("%d log lines for a burst of 5 refusals within the interval, want 1", n)
	}
	if a := logs.attrs(0); a["over_max_connections"].Uint64() != 1 || a["refused_total"].Uint64() != 1 {
		t.Errorf("first line: %v", a)
	}

	s.mu.Lock()
	s.loggedAt = s.loggedAt.Add(-time.Hour) // the interval has passed
	s.mu.Unlock()
	s.refused(t, dial(t, addr, ""))
	if n := logs.len(); n != 2 {
		t.Fatalf("%d log lines after the interval, want 2", n)
	}
	if a := logs.attrs(1); a["over_max_connections"].Uint64() != 5 || a["refused_total"].Uint64() != 6 {
		t.Errorf("second line: %v", a)
	}

	// Closing the listener tells the refusals still within the interval.
	for range 2 {
		s.refused(t, dial(t, addr, ""))
	}
	s.Listener.Close()
	if n := logs.len(); n != 3 {
		t.Fatalf("%d log lines after Close, want 3", n)
	}
	if a := logs.attrs(2); a["over_max_connections"].Uint64() != 2 || a["refused_total"].Uint64() != 8 {
		t.Errorf("line at Close: %v", a)
	}
}

// The refusals of a burst that stops within the interval are told when
// the interval ends, without waiting for another refusal.
func TestRefusalsLoggedWhenIntervalEnds(t *testing.T) {
	var logs records
	s := serve(t, Limits{Max: 1, MaxPerIP: 1, LogInterval: 20 * time.Millisecond, Logger: slog.New(&logs)})
	addr := s.Addr().String()
	dial(t, addr, "")
	s.admitted(t)
	for range 5 {
		s.refused(t, dial(t, addr, ""))
	}
	told := func() uint64 {
		var n uint64
		for i := range logs.len() {
			n += logs.attrs(i)["over_max_connections"].Uint64()
		}
		return n
	}
	testwait.For(t, "every refusal to be logged", func() bool { return told() == 5 })
}

// BenchmarkAccept measures accepting, admitting and closing one
// connection through the limits, against a plain listener for reference.
func BenchmarkAccept(b *testing.B) {
	for _, capped := range []bool{false, true} {
		name := "plain"
		if capped {
			name = "capped"
		}
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			if capped {
				ln = Wrap(ln, Limits{Max: 1 << 20, MaxPerIP: 1 << 20})
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			defer func() {
				ln.Close()
				<-done
			}()
			addr := ln.Addr().String()
			for b.Loop() {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				c.Read(make([]byte, 1)) // until the server has closed it
				c.Close()
			}
		})
	}
}

// BenchmarkAdmit measures the bookkeeping alone, from many goroutines:
// admitting and releasing a connection, and with an unproven budget
// admitting, proving and releasing it.
func BenchmarkAdmit(b *testing.B) {
	for _, unproven := range []int{0, 1 << 20} {
		b.Run(fmt.Sprintf("unproven=%d", unproven), func(b *testing.B) {
			l := Wrap(nil, Limits{Max: 1 << 30, MaxPerIP: 1 << 30, MaxUnproven: unproven})
			b.RunParallel(func(pb *testing.PB) {
				ip := netip.MustParseAddr("127.0.0.1")
				for pb.Next() {
					c := &conn{l: l, ip: ip}
					if ok, _ := l.admit(c); ok {
						l.prove(c)
						l.release(c)
					}
				}
			})
		})
	}
}

// With MaxUnproven, a flood of connections that never prove themselves
// (plain TCP connects from several addresses) churns through its own
// budget: the oldest unproven connection is closed to admit each new one,
// and a proven connection keeps its place. At the whole cap a new
// connection still gets in, in place of the oldest unproven one.
func TestUnprovenConnectionsHaveTheirOwnBudget(t *testing.T) {
	s := serve(t, Limits{Max: 6, MaxPerIP: 4, MaxUnproven: 3})
	addr := s.Addr().String()

	dial(t, addr, "127.0.0.1")
	proven := s.admitted(t)
	if !Prove(proven) {
		t.Fatal("Prove did not find the admitted connection")
	}
	var flood []net.Conn // the attacker's client ends
	for i := range 9 {
		flood = append(flood, dial(t, addr, fmt.Sprintf("127.0.0.%d", 2+i%3)))
		s.admitted(t)
	}
	// Only the newest three of the flood are open; the six before were
	// closed to make room, oldest first.
	for i, c := range flood[:6] {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("flood connection %d still open", i)
		}
	}
	if got, want := s.Open(), 4; got != want {
		t.Errorf("Open() = %d, want %d: the proven connection and three unproven", got, want)
	}
	if got := s.Evicted(); got != 6 {
		t.Errorf("Evicted() = %d, want 6", got)
	}
	// The proven connection is untouched.
	proven.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := proven.Read(make([]byte, 1)); err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the proven connection was closed: %v", err)
	}
	// Three more proven connections fill the whole cap; the next one
	// still gets in, in place of the oldest unproven.
	for range 2 {
		dial(t, addr, "127.0.0.9")
		Prove(s.admitted(t))
	}
	dial(t, addr, "127.0.0.9")
	Prove(s.admitted(t))
	if got := s.Open(); got != 6 {
		t.Errorf("Open() = %d at the whole cap, want 6", got)
	}
	dial(t, addr, "127.0.0.10")
	s.admitted(t)
	if got := s.Refused(); got != 0 {
		t.Errorf("Refused() = %d, want 0: an unproven connection made room each time", got)
	}
}
