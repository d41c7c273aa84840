package auth

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
)

// Reason is why the RPC port refused someone.
type Reason int

const (
	// Handshake: a TLS handshake failed (no TLS at all, a certificate the
	// cluster's CA did not sign, an expired one, a protocol error).
	Handshake Reason = iota
	// Unauthenticated: a call without valid credentials (no client
	// certificate, an unknown bearer token).
	Unauthenticated
	// Denied: a call whose caller may not make it.
	Denied
	numReasons
)

// String names the reason as the metric label and the log lines do.
func (r Reason) String() string {
	switch r {
	case Handshake:
		return "handshake"
	case Unauthenticated:
		return "unauthenticated"
	case Denied:
		return "denied"
	}
	return "unknown"
}

// RefusalLogInterval is the least time between two log lines about one
// reason for refusals.
const RefusalLogInterval = 10 * time.Second

// Refusals counts what the RPC port refuses, by reason, and logs it: the
// first refusal of a reason at once, with its address, identity and
// error; later ones at most once per RefusalLogInterval, each line with
// how many were refused since the previous one. The counts (Count) are
// exact; the lines bound an attacker's cost to the log at one per reason
// per interval. A nil *Refusals records nothing.
type Refusals struct {
	log    *slog.Logger
	counts [numReasons]atomic.Uint64

	mu     sync.Mutex
	last   [numReasons]time.Time // when a line for each reason was written
	missed [numReasons]uint64    // refusals since that line, not logged
}

// NewRefusals returns a Refusals that logs to log.
func NewRefusals(log *slog.Logger) *Refusals {
	return &Refusals{log: log.With("component", "security")}
}

// Record counts one refusal and logs it if a line for its reason is due.
// addr is the remote address, who the caller's identity when known.
func (r *Refusals) Record(reason Reason, addr, who string, err error) {
	if r == nil {
		return
	}
	r.counts[reason].Add(1)
	r.mu.Lock()
	now := time.Now()
	if now.Sub(r.last[reason]) < RefusalLogInterval {
		r.missed[reason]++
		r.mu.Unlock()
		return
	}
	missed := r.missed[reason]
	r.last[reason], r.missed[reason] = now, 0
	r.mu.Unlock()
	msg := "refused a call: " + reason.String()
	if reason == Handshake {
		msg = "refused a TLS handshake"
	}
	r.log.Warn(msg, "reason", reason.String(), "remote_addr", addr, "identity", who, "err", errText(err),
		"refused_since_last_line", missed, "refused_total", r.counts[reason].Load())
}

// Count is how many refusals of reason were recorded.
func (r *Refusals) Count(reason Reason) uint64 {
	if r == nil {
		return 0
	}
	return r.counts[reason].Load()
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// recordCall records a call that failed with err, if err refuses its
// caller: UNAUTHENTICATED or PERMISSION_DENIED.
func (r *Refusals) recordCall(c Caller, err error) {
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated:
		r.Record(Unauthenticated, c.Addr, c.Direct.String(), err)
	case connect.CodePermissionDenied:
		r.Record(Denied, c.Addr, c.Principal.String(), err)
	}
}

// HandshakeErrors is an io.Writer for http.Server's ErrorLog (through
// log.New): it records each "TLS handshake error" line as a Handshake
// refusal and passes every other line to next.
type HandshakeErrors struct {
	Refusals *Refusals
	Next     func(line string)
}

func (h HandshakeErrors) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if rest, ok := strings.CutPrefix(line, "http: TLS handshake error from "); ok {
		addr, detail, _ := strings.Cut(rest, ": ")
		h.Refusals.Record(Handshake, addr, "", errors.New(detail))
		return len(p), nil
	}
	if h.Next != nil {
		h.Next(line)
	}
	return len(p), nil
}
