package h2server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slicerd/slicerd/internal/testwait"
)

// limitedServer serves handler over cleartext HTTP/2 on loopback with
// conf, and returns its URL, conf's limiter and a client for it that
// opens a connection of its own per call of newClient.
func limitedServer(t testing.TB, conf *Server, handler http.HandlerFunc) (string, *startLimiter, func() *http.Client) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: handler, Protocols: protocols}
	if err := ConfigureServer(srv, conf); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	var mu sync.Mutex
	var transports []*http.Transport
	t.Cleanup(func() {
		mu.Lock()
		for _, tr := range transports {
			tr.CloseIdleConnections()
		}
		mu.Unlock()
		_ = srv.Close()
		<-done
	})
	newClient := func() *http.Client {
		tr := &http.Transport{Protocols: protocols}
		mu.Lock()
		transports = append(transports, tr)
		mu.Unlock()
		return &http.Client{Transport: tr}
	}
	return "http://" + l.Addr().String(), conf.startLimiter(), newClient
}

// dialed hands over each connection c dials (at most one unread), so
// that a test can close it under the client.
func dialed(c *http.Client) <-chan net.Conn {
	conns := make(chan net.Conn, 1)
	c.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := new(net.Dialer).DialContext(ctx, network, addr)
		if err == nil {
			conns <- nc
		}
		return nc, err
	}
	return conns
}

// receive waits for a value on ch, failing the test (with what it waited
// for) if none comes.
func receive[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	var v T
	testwait.For(t, what, func() bool {
		select {
		case v = <-ch:
			return true
		default:
			return false
		}
	})
	return v
}

// get sends a POST and reads the whole response, reporting failures on
// errs. Its body cannot be sent again, so the client never retries it on
// another connection.
func get(ctx context.Context, c *http.Client, url string, errs chan<- error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, io.NopCloser(strings.NewReader("x")))
	if err == nil {
		var resp *http.Response
		resp, err = c.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	errs <- err
}

// firstHolds serves, with one place among the starting handlers parked
// after park, a handler whose first call holds its place until release
// is closed; the others answer at once. It returns the server's URL and
// limiter, a client maker, and the number of calls so far.
func firstHolds(t *testing.T, park time.Duration, release <-chan struct{}) (string, *startLimiter, func() *http.Client, *atomic.Int64) {
	calls := new(atomic.Int64)
	url, lim, newClient := limitedServer(t, &Server{MaxStartingHandlers: 1, StartingHandlerPark: park}, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			<-release
		}
		io.WriteString(w, "ok")
	})
	return url, lim, newClient, calls
}

// settled reports whether the limiter counts no handler and no
// connection waits: every place came back.
func (l *startLimiter) settled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counted == 0 && len(l.waiting) == 0 && l.holding.Load() == 0
}

// At most MaxStartingHandlers handlers run before queueing their
// headers, over all connections; each queued header lets one more start,
// and every request is served.
func TestStartingHandlersAreLimited(t *testing.T) {
	const limit, conns, perConn = 3, 3, 6
	var started, headed atomic.Int64
	var over atomic.Int64 // starts beyond the limit
	entered := make(chan struct{}, conns*perConn)
	gate := make(chan struct{})
	url, lim, newClient := limitedServer(t, &Server{MaxStartingHandlers: limit, StartingHandlerPark: time.Hour}, func(w http.ResponseWriter, r *http.Request) {
		if n := started.Add(1) - headed.Load(); n > limit {
			over.Add(1)
		}
		entered <- struct{}{}
		<-gate
		headed.Add(1)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		io.WriteString(w, "ok")
	})
	errs := make(chan error, conns*perConn)
	for range conns {
		c := newClient()
		for range perConn {
			go get(context.Background(), c, url, errs)
		}
	}
	// Every connection has requests beyond the places: let them all
	// queue (or, were nothing limited, start) before any handler goes on.
	testwait.For(t, "the places to fill and every connection to wait", func() bool {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return started.Load() > limit || started.Load() == limit && len(lim.waiting) == conns
	})
	for range conns * perConn {
		<-entered
		gate <- struct{}{}
	}
	for range conns * perConn {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := over.Load(); n > 0 {
		t.Errorf("%d handlers started while %d others were starting", n, limit)
	}
	testwait.For(t, "every place to come back", lim.settled)
}

// A handler that calls Waiting gives its place back: with one place, a
// second handler starts while the first still waits.
func TestWaitingGivesThePlaceBack(t *testing.T) {
	release := make(chan struct{})
	second := make(chan struct{})
	var calls atomic.Int64
	url, lim, newClient := limitedServer(t, &Server{MaxStartingHandlers: 1, StartingHandlerPark: time.Hour}, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			Waiting(w)
			<-release
		} else {
			close(second)
		}
		io.WriteString(w, "ok")
	})
	errs := make(chan error, 2)
	c := newClient()
	go get(context.Background(), c, url, errs)
	testwait.For(t, "the first handler to start", func() bool { return calls.Load() == 1 })
	go get(context.Background(), c, url, errs)
	<-second
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	testwait.For(t, "every place to come back", lim.settled)
}

// A handler that holds its place without queueing headers or saying it
// waits is parked after StartingHandlerPark to twice that, so the next
// request starts anyway.
func TestStuckHandlersAreParked(t *testing.T) {
	release := make(chan struct{})
	url, lim, newClient, calls := firstHolds(t, 10*time.Millisecond, release)
	errs := make(chan error, 2)
	c := newClient()
	go get(context.Background(), c, url, errs)
	testwait.For(t, "the first handler to start", func() bool { return calls.Load() == 1 })
	go get(context.Background(), c, url, errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if lim.parked.Load() == 0 {
		t.Error("the second request was served with no handler parked")
	}
	close(release)
	if err := <-errs; err != nil {
		t.Error(err)
	}
	testwait.For(t, "every place to come back", lim.settled)
}

// Requests that wait for a place and are cancelled, or whose connection
// closes, hold none: the requests after them are served and every place
// comes back.
func TestCancelledWaitersHoldNoPlace(t *testing.T) {
	release := make(chan struct{})
	url, lim, newClient, calls := firstHolds(t, time.Hour, release)
	errs := make(chan error, 8)
	go get(context.Background(), newClient(), url, errs)
	testwait.For(t, "the first handler to start", func() bool { return calls.Load() == 1 })

	// Queued behind it: two requests on another connection, cancelled,
	// and one on a connection that is closed under it.
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := newClient()
	for range 2 {
		go get(ctx, cancelled, url, errs)
	}
	closing := newClient()
	conns := dialed(closing)
	go get(context.Background(), closing, url, errs)
	testwait.For(t, "the two connections to wait for a place", func() bool {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return len(lim.waiting) == 2
	})
	cancel()
	(<-conns).Close()
	for range 3 {
		if err := <-errs; err == nil {
			t.Error("a request cancelled or cut off while it waited succeeded")
		}
	}
	testwait.For(t, "the closed connection to leave the waiting list", func() bool {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return len(lim.waiting) == 1
	})
	close(release)
	if err := <-errs; err != nil {
		t.Error(err)
	}
	go get(context.Background(), newClient(), url, errs)
	if err := <-errs; err != nil {
		t.Error(err)
	}
	testwait.For(t, "every place to come back", lim.settled)
}

// BenchmarkStartLimiter is a request's cost in the limiter: one place
// taken and given back, by as many goroutines as GOMAXPROCS, each its
// own connection, with places to spare.
func BenchmarkStartLimiter(b *testing.B) {
	l := newStartLimiter(64, time.Hour)
	b.RunParallel(func(pb *testing.PB) {
		sc := &serverConn{starts: startState{wake: make(chan struct{}, 1)}}
		st := &stream{sc: sc}
		for pb.Next() {
			if !l.acquire(sc, st) {
				b.Fatal("no place")
			}
			l.release(st)
		}
	})
}

// BenchmarkRequests serves small requests over one HTTP/2 connection, 64
// at a time, with and without the starting-handler bound.
func BenchmarkRequests(b *testing.B) {
	for _, limit := range []int{0, 64} {
		b.Run(fmt.Sprintf("max_starting=%d", limit), func(b *testing.B) {
			url, _, newClient := limitedServer(b, &Server{MaxStartingHandlers: limit}, func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "ok")
			})
			c := newClient()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				errs := make(chan error, 1)
				for pb.Next() {
					get(context.Background(), c, url, errs)
					if err := <-errs; err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// A handler waiting for a request body the client has not sent yet
// gives its place back: with one place, a second request starts while
// the first body is still on its way.
func TestSlowBodyGivesThePlaceBack(t *testing.T) {
	var calls atomic.Int64
	url, lim, newClient := limitedServer(t, &Server{MaxStartingHandlers: 1, StartingHandlerPark: time.Hour}, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read body: %v", err)
		}
		w.Write(b)
	})
	c := newClient()
	body, send := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		slow <- err
	}()
	testwait.For(t, "the slow request's handler to start", func() bool { return calls.Load() == 1 })
	errs := make(chan error, 1)
	go get(context.Background(), c, url, errs)
	if err := receive(t, "a second request to be served while the first body is on its way", errs); err != nil {
		t.Fatal(err)
	}
	io.WriteString(send, "late")
	send.Close()
	if err := <-slow; err != nil {
		t.Error(err)
	}
	testwait.For(t, "every place to come back", lim.settled)
}
