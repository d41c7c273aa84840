package h2server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// detachServer serves handler over cleartext HTTP/2 on loopback through
// this package, and returns its URL and a client for it.
func detachServer(t *testing.T, handler http.HandlerFunc) (string, *http.Client) {
	t.Helper()
	url, _, newClient := limitedServer(t, &Server{NewWriteScheduler: func() WriteScheduler { return NewRandomWriteScheduler() }}, handler)
	return url, newClient()
}

// owner is a detached stream's owner for tests: next hands out queued
// chunks, and closed records how the stream ended.
type owner struct {
	mu     sync.Mutex
	queue  [][]byte
	end    *Write // returned once the queue is empty
	pulls  int
	closed chan error
	d      *Detached
}

func newOwner(chunks ...string) *owner {
	o := &owner{closed: make(chan error, 1)}
	for _, c := range chunks {
		o.queue = append(o.queue, []byte(c))
	}
	return o
}

func (o *owner) next() Write {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pulls++
	if len(o.queue) == 0 {
		if o.end != nil {
			return *o.end
		}
		return Write{}
	}
	p := o.queue[0]
	o.queue = o.queue[1:]
	return Write{Data: p}
}

func (o *owner) ending(w Write) {
	o.mu.Lock()
	o.end = &w
	o.mu.Unlock()
}

func (o *owner) pullCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pulls
}

func (o *owner) add(chunk string) {
	o.mu.Lock()
	o.queue = append(o.queue, []byte(chunk))
	o.mu.Unlock()
}

func (o *owner) onClose(err error) { o.closed <- err }

// detachingHandler sends headers and "first", detaches into o, then
// writes "discarded" as a library wrapping the handler might, and
// returns.
func detachingHandler(t *testing.T, o *owner, detached chan<- *Detached) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer:Grpc-Status", "")
		w.Header().Set("Content-Type", "text/plain")
		if _, err := io.WriteString(w, "first\n"); err != nil {
			t.Error(err)
			return
		}
		d, err := Detach(w, o.next, o.onClose)
		if err != nil {
			t.Errorf("Detach: %v", err)
			close(detached)
			return
		}
		o.d = d
		// Discarded: the handler's own end of the response.
		if _, err := io.WriteString(w, "discarded\n"); err != nil {
			t.Errorf("write after Detach: %v", err)
		}
		w.(http.Flusher).Flush()
		detached <- d
	}
}

func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("read: %v (got %q)", err, line)
	}
	return line
}

func TestDetachedStreamWritesKicksAndEnds(t *testing.T) {
	o := newOwner("second\n")
	detached := make(chan *Detached, 1)
	url, client := detachServer(t, detachingHandler(t, o, detached))

	resp, err := client.Post(url, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if got := readLine(t, br); got != "first\n" {
		t.Fatalf("first line %q", got)
	}
	d := <-detached
	if d == nil {
		t.FailNow()
	}
	// The handler has returned; the stream is open. A kick pulls until
	// next has nothing.
	Kick([]*Detached{d})
	if got := readLine(t, br); got != "second\n" {
		t.Fatalf("after a kick %q, want second (the handler's own writes are discarded)", got)
	}
	o.add("third\n")
	o.add("fourth\n")
	Kick([]*Detached{d, d}) // one connection: one message
	for _, want := range []string{"third\n", "fourth\n"} {
		if got := readLine(t, br); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	o.add("fifth\n")
	o.ending(Write{Data: []byte("last\n"), End: true, Trailers: http.Header{"Grpc-Status": {"0"}}})
	Kick([]*Detached{d})
	if got := readLine(t, br); got != "fifth\n" {
		t.Fatalf("got %q, want fifth", got)
	}
	if got := readLine(t, br); got != "last\n" {
		t.Fatalf("got %q, want last", got)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after End: %v, want EOF", err)
	}
	if got := resp.Trailer.Get("Grpc-Status"); got != "0" {
		t.Fatalf("trailer Grpc-Status %q, want 0", got)
	}
	select {
	case <-o.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("onClose not called after End")
	}
	// After the end nothing pulls or writes.
	pulls := o.pullCount()
	Kick([]*Detached{d})
	d.Reset(ErrCodeCancel)
	if o.pullCount() != pulls {
		t.Fatal("next was called after the stream closed")
	}
}

func TestDetachedStreamClosesWithThePeer(t *testing.T) {
	o := newOwner()
	detached := make(chan *Detached, 1)
	url, client := detachServer(t, detachingHandler(t, o, detached))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	readLine(t, bufio.NewReader(resp.Body))
	if <-detached == nil {
		t.FailNow()
	}
	cancel() // the client resets the stream
	select {
	case err := <-o.closed:
		if err == nil {
			t.Fatal("onClose(nil) for a stream the peer reset")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("onClose not called after the peer reset the stream")
	}
}

func TestDetachedStreamReset(t *testing.T) {
	o := newOwner()
	detached := make(chan *Detached, 1)
	url, client := detachServer(t, detachingHandler(t, o, detached))
	resp, err := client.Post(url, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	readLine(t, br)
	d := <-detached
	if d == nil {
		t.FailNow()
	}
	d.Reset(ErrCodeInternal)
	if _, err := io.ReadAll(br); err == nil {
		t.Fatal("a reset stream read to a clean end")
	}
	<-o.closed
}

func TestDetachRefusals(t *testing.T) {
	// Headers not sent yet.
	url, client := detachServer(t, func(w http.ResponseWriter, r *http.Request) {
		if _, err := Detach(w, nil, nil); !errors.Is(err, ErrNotDetachable) {
			t.Errorf("Detach before headers: %v, want ErrNotDetachable", err)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Not an HTTP/2 response of this package.
	if _, err := Detach(nopWriter{}, nil, nil); !errors.Is(err, ErrNotDetachable) {
		t.Fatalf("Detach of another ResponseWriter: %v", err)
	}
}

type nopWriter struct{}

func (nopWriter) Header() http.Header         { return http.Header{} }
func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (nopWriter) WriteHeader(int)             {}

// Detach on a connection whose serve loop has ended returns an error
// instead of waiting forever for an answer to a message nobody takes.
// Its message may or may not go into the connection's buffered channel,
// so the test tries ten times.
func TestDetachAfterTheConnectionEnded(t *testing.T) {
	for range 10 {
		detachAfterTheConnectionEnded(t)
	}
}

func detachAfterTheConnectionEnded(t *testing.T) {
	detached := make(chan error, 1)
	url, _, newClient := limitedServer(t, &Server{}, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-w.(*responseWriter).rws.conn.doneServing
		_, err := Detach(w, func() Write { return Write{} }, nil)
		detached <- err
	})
	c := newClient()
	conns := dialed(c)
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	(<-conns).Close()
	if err := receive(t, "Detach to return", detached); err == nil {
		t.Error("Detach on an ended connection succeeded")
	}
}
