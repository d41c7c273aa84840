package watch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
)

// Limiter caps the streaming RPCs (WatchAssignment on every role,
// and server reflection) open at once in one agent, across all
// connections. A stream over the cap
// fails at once with ResourceExhausted before its handler runs, so it
// costs no more than its headers; each open stream holds a goroutine and
// its subscriber state until it ends. Unary calls pass untouched.
type Limiter struct {
	max         int64
	logInterval time.Duration
	log         *slog.Logger

	open    atomic.Int64
	refused atomic.Uint64

	mu         sync.Mutex
	lastLog    time.Time
	unreported uint64 // refusals since the last log line
}

// NewLimiter returns a Limiter of max streams that logs refusals on log,
// at most once per logInterval.
func NewLimiter(max int, logInterval time.Duration, log *slog.Logger) *Limiter {
	return &Limiter{max: int64(max), logInterval: logInterval, log: log}
}

// Open is the number of streams being served.
func (l *Limiter) Open() int { return int(l.open.Load()) }

// Refused is the number of streams refused over the cap since the start.
func (l *Limiter) Refused() uint64 { return l.refused.Load() }

// WrapUnary implements connect.Interceptor.
func (l *Limiter) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

// WrapStreamingClient implements connect.Interceptor.
func (l *Limiter) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor: it admits a stream
// while fewer than max are open.
func (l *Limiter) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refuse(conn.Spec().Procedure, conn.Peer().Addr)
			return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
				"%w: this node already serves %d streams (--max-streams); retry later or against another node, "+
					"or raise --max-streams", ErrTooManyStreams, l.max))
		}
		defer l.open.Add(-1)
		return next(ctx, conn)
	}
}

// refuse counts a refusal and logs it, at most once per logInterval, with
// the number of refusals the line stands for.
func (l *Limiter) refuse(procedure, peer string) {
	l.refused.Add(1)
	l.mu.Lock()
	l.unreported++
	now := time.Now()
	if !l.lastLog.IsZero() && now.Sub(l.lastLog) < l.logInterval {
		l.mu.Unlock()
		return
	}
	n := l.unreported
	l.lastLog, l.unreported = now, 0
	l.mu.Unlock()
	l.log.Warn("refused streams over --max-streams", "max_streams", l.max, "refused", n,
		"last_procedure", procedure, "last_peer", peer)
}
