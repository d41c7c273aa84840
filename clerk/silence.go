package clerk

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
)

// silenceWatch ends a WatchAssignment stream whose server announced
// heartbeats (api.HeartbeatIntervalHeader) once no byte of the stream
// arrived for api.HeartbeatMisses of the announced intervals: a server
// stalled in the middle of a message, or one that keeps the connection
// alive (HTTP/2 pings are answered) but stopped sending on the stream.
// It counts bytes, not messages, so a large assignment that arrives
// slowly keeps its stream, and the time the Clerk spends on a message it
// received (OnAssignment included) is not silence. A stream whose server
// announced nothing (one that predates heartbeats) has no such deadline.
type silenceWatch struct {
	announced chan time.Duration // the interval, sent once when announced
	interval  atomic.Int64       // the announced interval, 0 before
	last      atomic.Int64       // when a byte last arrived, in Unix nanoseconds
	busy      atomic.Bool        // the Clerk is handling a message, not reading
	fired     atomic.Bool        // the stream was ended for its silence
	// answered is when the server's response headers arrived, in Unix
	// nanoseconds; 0 before (the connection or the call is still being
	// set up, or failed).
	answered atomic.Int64
}

// openFor reports how long the stream has been open since the server
// answered, 0 if it never did.
func (w *silenceWatch) openFor() time.Duration {
	at := w.answered.Load()
	if at == 0 {
		return 0
	}
	return time.Since(time.Unix(0, at))
}

// handling tells w that the Clerk handles a message and does not read;
// done, that it reads again.
func (w *silenceWatch) handling() { w.busy.Store(true) }
func (w *silenceWatch) done() {
	w.heard()
	w.busy.Store(false)
}

// limit is how long the stream may stay silent, 0 without heartbeats.
func (w *silenceWatch) limit() time.Duration {
	return api.HeartbeatMisses * time.Duration(w.interval.Load())
}

// heard records that bytes arrived.
func (w *silenceWatch) heard() { w.last.Store(time.Now().UnixNano()) }

// run waits for the server's announcement, then calls cancel once the
// stream is silent for limit, and returns; it returns when ctx ends.
func (w *silenceWatch) run(ctx context.Context, cancel context.CancelFunc) {
	var interval time.Duration
	select {
	case <-ctx.Done():
		return
	case interval = <-w.announced:
	}
	limit := api.HeartbeatMisses * interval
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		silent := time.Since(time.Unix(0, w.last.Load()))
		if w.busy.Load() {
			silent = 0
		}
		if silent >= limit {
			w.fired.Store(true)
			cancel()
			return
		}
		t.Reset(limit - silent)
	}
}

// silenceClient is the Clerk's HTTP client for one stream: it reads the
// response's heartbeat announcement and tells w of every byte read.
type silenceClient struct {
	connect.HTTPClient
	w *silenceWatch
}

func (c silenceClient) Do(r *http.Request) (*http.Response, error) {
	resp, err := c.HTTPClient.Do(r)
	if err != nil || resp == nil {
		return resp, err
	}
	c.w.answered.Store(time.Now().UnixNano())
	c.w.heard()
	if d := api.AnnouncedHeartbeat(resp.Header); d > 0 {
		c.w.interval.Store(int64(d))
		select {
		case c.w.announced <- d:
		default: // announced already
		}
	}
	resp.Body = silenceBody{ReadCloser: resp.Body, w: c.w}
	return resp, nil
}

// silenceBody is a response body that tells its silenceWatch of every
// byte read.
type silenceBody struct {
	io.ReadCloser
	w *silenceWatch
}

func (b silenceBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.heard()
	}
	return n, err
}
