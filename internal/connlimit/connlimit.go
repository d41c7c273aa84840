// Package connlimit caps the connections a listener keeps open, in all and
// per remote IP address. A connection over a cap is accepted and closed at
// once, so Accept never blocks and a flood cannot stall the accept queue
// for everyone else (golang.org/x/net/netutil.LimitListener blocks instead).
// Refusals are counted and logged at most once per interval: the first at
// once, those within the interval in one line when it ends.
package connlimit

import (
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

	mu    sync.Mutex
	open  int
	perIP map[netip.Addr]int
	// Refusals not yet logged, the address of the last, when the last
	// line was written, and the timer that writes the next one.
	pendingMax, pendingIP uint64
	lastIP                netip.Addr
	loggedAt              time.Time
	flush                 *time.Timer
	closed                bool
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
		if l.admit(ip) {
			return &conn{Conn: c, l: l, ip: ip}, nil
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

// Close closes the listener, logging the refusals not yet logged.
func (l *Listener) Close() error {
	l.mu.Lock()
	if !l.closed && l.pendingMax+l.pendingIP > 0 {
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

func (l *Listener) admit(ip netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open >= l.lim.Max:
		l.pendingMax++
	case l.perIP[ip] >= l.lim.MaxPerIP:
		l.pendingIP++
	default:
		l.open++
		l.perIP[ip]++
		return true
	}
	l.refused.Add(1)
	l.lastIP = ip
	if wait := l.lim.LogInterval - time.Since(l.loggedAt); wait > 0 {
		// Within the interval: the line for this refusal comes when it
		// ends, so that the count of a burst that stops is still told.
		if l.flush == nil && !l.closed {
			l.flush = time.AfterFunc(wait, l.logPending)
		}
		return false
	}
	l.logLocked()
	return false
}

func (l *Listener) logPending() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flush = nil
	if l.closed || l.pendingMax+l.pendingIP == 0 {
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
		"refused_total", l.refused.Load())
	l.pendingMax, l.pendingIP, l.loggedAt = 0, 0, time.Now()
	if l.flush != nil {
		l.flush.Stop()
		l.flush = nil
	}
}

func (l *Listener) release(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
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
	l    *Listener
	ip   netip.Addr
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}
