package clerk_test

import (
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// hostileDistributor is a Distributor (Connect protocol over h2c) whose
// WatchAssignment answer is one message whose envelope declares
// declared bytes, of which it then sends up to send bytes, 1 MiB at a time,
// and then holds the stream open. It records how much of the body the
// client took before it dropped the stream.
type hostileDistributor struct {
	srv      *http.Server
	ln       net.Listener
	sent     atomic.Int64
	dropped  atomic.Bool
	finished chan struct{}
}

func newHostileDistributor(t *testing.T, declared uint32, send int64) *hostileDistributor {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hostileDistributor{ln: ln, finished: make(chan struct{}, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("/slicer.v1.DistributorService/WatchAssignment", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/connect+proto")
		w.WriteHeader(http.StatusOK)
		var prefix [5]byte
		binary.BigEndian.PutUint32(prefix[1:], declared)
		if _, err := w.Write(prefix[:]); err != nil {
			h.dropped.Store(true)
			return
		}
		w.(http.Flusher).Flush()
		chunk := make([]byte, 1<<20)
		for h.sent.Load() < send {
			if _, err := w.Write(chunk); err != nil {
				h.dropped.Store(true)
				break
			}
			w.(http.Flusher).Flush()
			h.sent.Add(int64(len(chunk)))
		}
		select {
		case h.finished <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
			h.dropped.Store(true)
		case <-time.After(3 * time.Second):
		}
	})
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	h.srv = &http.Server{Handler: mux, Protocols: protocols}
	go func() { _ = h.srv.Serve(ln) }()
	t.Cleanup(func() { _ = h.srv.Close() })
	return h
}

// A Distributor whose message declares (and keeps sending) gigabytes must
// not make the Clerk buffer it: a real assignment is a few megabytes (the
// Go cache file refuses one above 1 GiB, and the Python Clerk refuses to
// receive one above 1 GiB). The Clerk reads on into memory instead: no
// bound on what a Distributor makes it hold (up to 4 GiB a message, and
// more through compression).
func TestHostileDistributorHugeMessageIsRefused(t *testing.T) {
	const send = 96 << 20
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	h := newHostileDistributor(t, 0xFFFFFFF0, send)
	cfg := testConfig(h.ln.Addr().String())
	cfg.SubsetSize = 0
	start(t, cfg)
	select {
	case <-h.finished:
	case <-time.After(60 * time.Second):
		t.Fatalf("the server sent only %d MiB in a minute", h.sent.Load()>>20)
	}
	time.Sleep(200 * time.Millisecond) // let the client read what was sent
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("server sent %d MiB of a message declared as %d bytes; client dropped the stream: %v; heap in use grew by %d MiB",
		h.sent.Load()>>20, uint32(0xFFFFFFF0), h.dropped.Load(), grew>>20)
	if grew > 32<<20 {
		t.Fatalf("the Clerk holds %d MiB for one unfinished message of a Distributor (declared %d bytes): no bound on what a server makes it buffer",
			grew>>20, uint32(0xFFFFFFF0))
	}
}
