// Package hostcheck refuses HTTP requests whose Host header names a host
// the server does not answer to, so that a web page cannot reach a
// slicerd on loopback or a private network through DNS rebinding: the
// browser sends the attacker's own name as Host, which no allow-list holds.
//
// IP literals and localhost always pass (a browser only sends them when the
// page itself was loaded from that address), as do the server's own names
// and the names an operator allows. Refusals are counted and logged at most
// once per interval, each line counting the refusals since the previous one.
package hostcheck

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
)

// Any, in Options.Allowed, allows every host: for servers behind a proxy
// that checks Host itself.
const Any = "*"

// Options configure a Checker.
type Options struct {
	// Allowed lists host names that pass besides IP literals and
	// localhost: exact names, "*.suffix" for every name under suffix, or
	// Any. Case does not matter; a trailing dot is ignored.
	Allowed []string
	// Flag names the setting an operator changes to allow a host, for the
	// refusal message (e.g. "--allowed-hosts").
	Flag string
	// LogInterval is the least time between two log lines about refusals.
	LogInterval time.Duration
	// Logger receives the refusal lines; nil discards them.
	Logger *slog.Logger
}

// Checker decides which Host headers pass. It is safe for concurrent use.
type Checker struct {
	any      bool
	names    map[string]bool
	suffixes []string // ".example.com" for "*.example.com"
	flag     string
	interval time.Duration
	log      *slog.Logger
	errors   *connect.ErrorWriter

	refused atomic.Uint64

	mu         sync.Mutex
	pending    uint64
	lastHost   string
	lastRemote string
	loggedAt   time.Time
}

// New returns a Checker; entries of o.Allowed must pass ValidateAllowed.
func New(o Options) *Checker {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Checker{names: make(map[string]bool), flag: o.Flag, interval: o.LogInterval, log: log,
		errors: connect.NewErrorWriter()}
	for _, a := range o.Allowed {
		a = normalize(a)
		switch {
		case a == Any:
			c.any = true
		case strings.HasPrefix(a, "*."):
			c.suffixes = append(c.suffixes, a[1:])
		case a != "":
			c.names[a] = true
		}
	}
	return c
}

// ValidateAllowed checks one entry of Options.Allowed: Any, a host name
// or IP address without port, or "*." and a host name.
func ValidateAllowed(a string) error {
	if a == Any {
		return nil
	}
	name := strings.TrimPrefix(a, "*.")
	if name == "" {
		return fmt.Errorf("empty host name")
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return nil
	}
	for _, label := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("%q is not a host name (no port, no scheme; e.g. slicerd.example.com)", a)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return fmt.Errorf("%q is not a host name (no port, no scheme; e.g. slicerd.example.com)", a)
			}
		}
	}
	return nil
}

// ParseHost returns the host of a Host header value (host, host:port,
// [v6] or [v6]:port, or a bare v6 address), lowercased and without a
// trailing dot; ok is false when the value is malformed.
func ParseHost(hostport string) (host string, ok bool) {
	if hostport == "" || strings.ContainsFunc(hostport, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune(`/\@`, r)
	}) {
		return "", false
	}
	if strings.HasPrefix(hostport, "[") {
		end := strings.IndexByte(hostport, ']')
		if end < 0 {
			return "", false
		}
		rest := hostport[end+1:]
		if rest != "" && !validPort(strings.TrimPrefix(rest, ":")) || rest != "" && rest[0] != ':' {
			return "", false
		}
		host = hostport[1:end]
		if _, err := netip.ParseAddr(host); err != nil || !strings.Contains(host, ":") || strings.ContainsAny(host, "[]") {
			return "", false
		}
		return strings.ToLower(host), true
	}
	if strings.Count(hostport, ":") > 1 { // a bare IPv6 address
		if _, err := netip.ParseAddr(hostport); err != nil || strings.ContainsAny(hostport, "[]") {
			return "", false
		}
		return strings.ToLower(hostport), true
	}
	host = hostport
	if i := strings.IndexByte(hostport, ':'); i >= 0 {
		if !validPort(hostport[i+1:]) {
			return "", false
		}
		host = hostport[:i]
	}
	if host == "" || strings.ContainsAny(host, "[]%") {
		return "", false
	}
	host = normalize(host)
	if host == "" || strings.HasPrefix(host, ".") || strings.HasSuffix(host, ".") || strings.Contains(host, "..") {
		return "", false // empty labels
	}
	return host, true
}

func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return p == "" // "host:" is allowed by RFC 3986
	}
	for _, r := range p {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func normalize(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// Allowed reports whether a request with this Host header passes. An
// empty Host (HTTP/1.0) passes: there is no name to rebind.
func (c *Checker) Allowed(hostport string) bool {
	if c.any || hostport == "" {
		return true
	}
	host, ok := ParseHost(hostport)
	if !ok {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	if host == "localhost" || c.names[host] {
		return true
	}
	for _, s := range c.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// Refused is the number of requests refused since New.
func (c *Checker) Refused() uint64 { return c.refused.Load() }

// Wrap returns a handler that passes requests with an allowed Host to h
// and answers the others: Connect, gRPC and gRPC-Web calls (told by their
// Content-Type) with a PERMISSION_DENIED error, anything else with 421
// Misdirected Request.
func (c *Checker) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.Allowed(r.Host) {
			h.ServeHTTP(w, r)
			return
		}
		c.note(r.Host, r.RemoteAddr)
		msg := fmt.Sprintf("host %q is not allowed: slicerd answers to IP addresses, localhost and its own RPC address "+
			"names; to allow this name, add it to %s", r.Host, c.flag)
		if r.Header.Get("Content-Type") != "" && c.errors.IsSupported(r) {
			c.errors.Write(w, r, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s", msg)))
			return
		}
		http.Error(w, msg, http.StatusMisdirectedRequest)
	})
}

// note counts a refusal and logs it when the interval since the last
// line is over; refusals within the interval are told by the next line,
// or by Close.
func (c *Checker) note(host, remote string) {
	c.refused.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending++
	c.lastHost = host
	c.lastRemote = remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		c.lastRemote = h
	}
	if time.Since(c.loggedAt) < c.interval {
		return
	}
	c.logLocked()
}

func (c *Checker) logLocked() {
	c.log.Warn("refused requests with a foreign Host header; see Host check in docs/operations.md",
		"refused", c.pending, "last_host", c.lastHost, "last_remote_ip", c.lastRemote, "flag", c.flag,
		"refused_total", c.refused.Load())
	c.pending, c.loggedAt = 0, time.Now()
}

// Close logs the refusals not yet logged.
func (c *Checker) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending > 0 {
		c.logLocked()
	}
}
