// Package connlimit caps the connections a listener keeps open, in all and
// per remote IP address. A connection over a cap is accepted and closed at
// once, so Accept never blocks and a flood cannot stall the accept queue
// for everyone else (golang.org/x/net/netutil.LimitListener blocks instead).
// Refusals are counted and logged at most once per interval: the first at
// once, those within the interval in one line when it ends.
//
// With Limits.MaxUnproven, connections that have not proven an identity
// (Prove: a TLS handshake with a client certificate the cluster's CA
// signed) have a budget of their own: when it is spent, or the whole cap
// is, the oldest unproven connection is closed to admit the new one. A
// flood of plain TCP connects then churns through the unproven budget
// instead of refusing every task, peer and client that proves itself.
package connlimit

import (
	"container/list"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Limits configures a Listener.
type Limits struct {
	// Max caps the open connections in all; MaxPerIP those from one remote
	// IP address. Both must be positive.
	Max, MaxPerIP int
	// MaxUnproven caps the open connections not yet proven (Prove); the
	// oldest of them is closed to make room. 0: connections are not told
	// apart, and one over Max is refused.
	MaxUnproven int
	// LogInterval is the least time between two log lines about refused
	// connections; each line carries the count since the previous one.
	LogInterval time.Duration
	// Logger receives the refusal lines; nil discards them.
	Logger *slog.Logger
}

// Listener is a net.Listener that enforces Limits. Connections it returns
// release their place when closed.
type Listener struct {
	net.Listener
	lim Limits
	log *slog.Logger

	refused atomic.Uint64
	evicted atomic.Uint64

	mu    sync.Mutex
	open  int
	perIP map[netip.Addr]int
	// unproven lists the admitted connections not yet proven, oldest
	// first (with MaxUnproven only).
	unproven list.List
	// Refusals not yet logged, the address of the last, when the last
	// line was written, and the timer that writes the next one.
	pendingMax, pendingIP, pendingEvicted uint64
	lastIP                                netip.Addr
	loggedAt                              time.Time
	flush                                 *time.Timer
	closed                                bool
}

// Wrap returns a Listener enforcing lim on the connections ln accepts.
func Wrap(ln net.Listener, lim Limits) *Listener {
	log := lim.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Listener{Listener: ln, lim: lim, log: log, perIP: make(map[netip.Addr]int)}
}

// Accept returns the next connection within the limits, closing those
// over them as they arrive.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		w := &conn{Conn: c, l: l, ip: ip}
		ok, evict := l.admit(w)
		if evict != nil {
			evict.evict()
		}
		if ok {
			return w, nil
		}
		c.Close()
	}
}

// Open is the number of connections currently admitted.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Refused is the number of connections refused since Wrap.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Evicted is the number of unproven connections closed to admit newer
// ones since Wrap.
func (l *Listener) Evicted() uint64 { return l.evicted.Load() }

// Prove marks c, a connection this package's Listener admitted (or one
// that wraps it and unwraps through a NetConn method, as tls.Conn does),
// as proven: it no longer counts against MaxUnproven and is never closed
// to make room. It reports whether it found such a connection.
func Prove(c net.Conn) bool {
	for c != nil {
		if w, ok := c.(*conn); ok {
			w.l.prove(w)
			return true
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return false
		}
		c = u.NetConn()
	}
	return false
}

func (l *Listener) prove(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.elem != nil {
		l.unproven.Remove(c.elem)
		c.elem = nil
	}
}

// Close closes the listener, logging the refusals not yet logged.
func (l *Listener) Close() error {
	l.mu.Lock()
	if !l.closed && l.pendingMax+l.pendingIP+l.pendingEvicted > 0 {
		l.logLocked()
	}
	l.closed = true
	if l.flush != nil {
		l.flush.Stop()
		l.flush = nil
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

// admit decides on c: admitted, or refused; and, to admit it, which
// unproven connection to close (the caller closes it).
func (l *Listener) admit(c *conn) (ok bool, evict *conn) {
	ip := c.ip
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lim.MaxUnproven > 0 && l.perIP[ip] < l.lim.MaxPerIP && l.unproven.Len() > 0 &&
		(l.unproven.Len() >= l.lim.MaxUnproven || l.open >= l.lim.Max) {
		// Make room: the oldest unproven connection goes, and stops
		// counting now.
		evict = l.unproven.Front().Value.(*conn)
		l.releaseLocked(evict)
		l.evicted.Add(1)
		l.pendingEvicted++
		l.lastIP = evict.ip
		l.noteLocked()
	}
	switch {
	case l.open >= l.lim.Max:
		l.pendingMax++
	case l.perIP[ip] >= l.lim.MaxPerIP:
		l.pendingIP++
	default:
		l.open++
		l.perIP[ip]++
		if l.lim.MaxUnproven > 0 {
			c.elem = l.unproven.PushBack(c)
		}
		return true, evict
	}
	l.refused.Add(1)
	l.lastIP = ip
	l.noteLocked()
	return false, evict
}

// noteLocked writes the line for pending refusals and evictions now, or
// has it written when the log interval ends.
func (l *Listener) noteLocked() {
	if wait := l.lim.LogInterval - time.Since(l.loggedAt); wait > 0 {
		// Within the interval: the line for this refusal comes when it
		// ends, so that the count of a burst that stops is still told.
		if l.flush == nil && !l.closed {
			l.flush = time.AfterFunc(wait, l.logPending)
		}
		return
	}
	l.logLocked()
}

func (l *Listener) logPending() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flush = nil
	if l.closed || l.pendingMax+l.pendingIP+l.pendingEvicted == 0 {
		return
	}
	if wait := l.lim.LogInterval - time.Since(l.loggedAt); wait > 0 {
		l.flush = time.AfterFunc(wait, l.logPending) // a line was written since this was set
		return
	}
	l.logLocked()
}

// logLocked writes the line for the pending refusals. Lines are rare (one
// per interval), so writing under the lock costs nothing that matters.
func (l *Listener) logLocked() {
	l.log.Warn("refused connections over the limit; see Connection limits in docs/operations.md",
		"over_max_connections", l.pendingMax, "over_max_connections_per_ip", l.pendingIP,
		"last_remote_ip", l.lastIP.String(), "open", l.open,
		"max_connections", l.lim.Max, "max_connections_per_ip", l.lim.MaxPerIP,
		"refused_total", l.refused.Load(),
		"evicted_unproven", l.pendingEvicted, "unproven", l.unproven.Len(), "max_unproven_connections", l.lim.MaxUnproven,
		"evicted_total", l.evicted.Load())
	l.pendingMax, l.pendingIP, l.pendingEvicted, l.loggedAt = 0, 0, 0, time.Now()
	if l.flush != nil {
		l.flush.Stop()
		l.flush = nil
	}
}

func (l *Listener) release(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked(c)
}

// releaseLocked gives c's place back, once.
func (l *Listener) releaseLocked(c *conn) {
	if c.released {
		return
	}
	c.released = true
	if c.elem != nil {
		l.unproven.Remove(c.elem)
		c.elem = nil
	}
	ip := c.ip
	l.open--
	if n := l.perIP[ip] - 1; n > 0 {
		l.perIP[ip] = n
	} else {
		delete(l.perIP, ip)
	}
}

// remoteIP is the connection's remote address without its port; every
// connection of unknown form counts against the zero address.
func remoteIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

type conn struct {
	net.Conn
	l  *Listener
	ip netip.Addr
	// Guarded by l.mu: the connection's element in l.unproven while
	// unproven, and whether its place was given back (by Close, or when
	// admit closed it to make room).
	elem     *list.Element
	released bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.l.release(c)
	return err
}

// NetConn returns the connection c wraps.
func (c *conn) NetConn() net.Conn { return c.Conn }

// evict closes a connection admit chose to make room; its place was
// released already.
func (c *conn) evict() { _ = c.Conn.Close() }
