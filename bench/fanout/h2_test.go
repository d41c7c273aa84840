//go:build linux

package main

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/internal/testwait"
)

// A -client h2 connection that the server closes is dialled again, and
// its streams reopen from the generation they hold, as a Clerk's would;
// the redial is counted.
func TestH2ConnectionIsDialledAgain(t *testing.T) {
	const streams, conns = 21, 2 // streams 1..20: 10 on each connection

	var mu sync.Mutex
	known := map[uint64]int{} // known_generation of each request → requests
	srv := &http.Server{Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req slicerv1.WatchAssignmentRequest
		if err != nil || len(body) < 5 || proto.Unmarshal(body[5:], &req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		known[req.GetKnownGeneration()]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/connect+proto")
		if req.GetKnownGeneration() < 1 {
			msg, _ := proto.Marshal(&slicerv1.WatchAssignmentResponse{Assignment: &slicerv1.Assignment{Job: "kv", Generation: 1, Incarnation: "i"}})
			env := make([]byte, 5+len(msg))
			binary.BigEndian.PutUint32(env[1:5], uint32(len(msg)))
			copy(env[5:], msg)
			w.Write(env)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})}
	srv.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 4)
	go srv.Serve(acceptTracker{ln, accepted})
	t.Cleanup(func() { srv.Close() })

	s := newSubscribers(streams, conns, []string{ln.Addr().String()}, true, true)
	s.rawAddr, s.conns = ln.Addr().String(), conns
	ctx, cancel := context.WithCancel(context.Background())
	s.startRaw(ctx)
	t.Cleanup(func() { cancel(); s.wg.Wait() })

	testwait.For(t, "every stream has generation 1", func() bool { return s.opened.Load() == streams-1 })
	// The server drops one of the two connections.
	(<-accepted).Close()
	testwait.For(t, "the dropped connection's 10 streams reopen holding generation 1", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return known[1] == 10
	})
	if n := s.redials.Load(); n != 1 {
		t.Errorf("redials = %d, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if known[0] != streams-1 {
		t.Errorf("%d requests without a generation, want %d: a reopened stream must say what it holds", known[0], streams-1)
	}
}

// acceptTracker hands every connection it accepts to accepted too.
type acceptTracker struct {
	net.Listener
	accepted chan<- net.Conn
}

func (l acceptTracker) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		select {
		case l.accepted <- c:
		default:
		}
	}
	return c, err
}
