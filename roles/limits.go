package roles

import (
	"errors"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
)

// maxStartingRPCsLimit bounds --max-starting-rpcs: far above what any
// machine starts at once, and below what would overflow the counts.
const maxStartingRPCsLimit = 1 << 20

// maxStartingHandlers is how many RPCs the node serves at once until they
// answer or wait (internal/startgate):
// configured (--max-starting-rpcs), or by default 32 per CPU the Go
// scheduler runs on, and at least 64. A handler on the CPU is done with
// that part in a millisecond or less, so the default keeps every CPU
// busy while the run queue stays short; one that holds its place longer
// (a slow store, say) stops counting after 100 to 200 ms.
func maxStartingHandlers(configured int) int {
	if configured > 0 {
		return configured
	}
	return max(64, 32*runtime.GOMAXPROCS(0))
}

// bodyTimeout ends the reading of a request body that has not arrived in
// full within d of the request's start: the read fails, the call ends
// with an error, which must then be sent within d too, or the stream is
// reset (on HTTP/1.1 the connection closed); either way its handler and
// stream are freed. Without it a caller could start calls (up to
// --max-streams-per-connection on each HTTP/2 connection, a health check
// needing no identity) and never finish their bodies, each holding a
// handler for as long as the connection lives. A body that arrived in
// full is not affected, so a call may take as long as it needs once its
// request is in: a WatchAssignment stream, whose request is one message,
// or a GetAssignment waiting for a first assignment. Reflection streams
// are bidirectional, their requests come while they last: they are left
// alone, and counted by --max-streams.
func bodyTimeout(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody && !strings.HasPrefix(r.URL.Path, "/grpc.reflection.") {
			rc := http.NewResponseController(w)
			// On HTTP/1.1, net/http lifts the deadline once the body is
			// read to its end; on HTTP/2 it only ends a body still open.
			if rc.SetReadDeadline(time.Now().Add(d)) == nil {
				r.Body = &timedBody{ReadCloser: r.Body, rc: rc, d: d}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// timedBody gives the answer to a call whose body was cut off by its read
// deadline that long again to be sent.
type timedBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	d    time.Duration
	once sync.Once
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		b.once.Do(func() { _ = b.rc.SetWriteDeadline(time.Now().Add(b.d)) })
	}
	return n, err
}
