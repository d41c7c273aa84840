package clerk_test

import (
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/internal/testwait"
)

// stallingDistributor is a Distributor (Connect protocol over h2c) that
// keeps its connection alive, answering HTTP/2 pings, but stops sending
// on its WatchAssignment streams: it sends first (the bytes of a
// whole or partial message), then, every beat when beat is set, empty
// messages (heartbeats) to a client that asked for them, and holds the
// stream open until the client ends it. It announces heartbeats every
// announce, when set, to a client that asked.
type stallingDistributor struct {
	ln    net.Listener
	opens atomic.Int64 // streams opened
	beats atomic.Int64 // heartbeats sent
}

func newStallingDistributor(t *testing.T, announce time.Duration, first []byte, beat time.Duration) *stallingDistributor {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &stallingDistributor{ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("/slicer.v1.DistributorService/WatchAssignment", func(w http.ResponseWriter, r *http.Request) {
		d.opens.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/connect+proto")
		asked := r.Header.Get(api.HeartbeatHeader) == "1"
		if announce > 0 && asked {
			w.Header().Set(api.HeartbeatIntervalHeader, strconv.FormatInt(announce.Milliseconds(), 10))
		}
		w.WriteHeader(http.StatusOK)
		if _, err := w.Write(first); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		var tick <-chan time.Time
		if beat > 0 && asked {
			t := time.NewTicker(beat)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick:
				if _, err := w.Write(envelope(nil)); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				d.beats.Add(1)
			}
		}
	})
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: protocols}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return d
}

// envelope frames msg as one Connect streaming message.
func envelope(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// wholeMessage is the framed WatchAssignmentResponse that brings gen.
func wholeMessage(t *testing.T, gen uint64) []byte {
	t.Helper()
	b, err := proto.Marshal(&slicerv1.WatchAssignmentResponse{Assignment: api.ToProto(clerktest.Uniform(job, gen, tasks, 4))})
	if err != nil {
		t.Fatal(err)
	}
	return envelope(b)
}

// A Distributor that announced heartbeats and then goes silent on the
// stream, whether in the middle of a message or between messages, while
// answering pings, is left for the next server once the stream is silent
// for HeartbeatMisses of the announced intervals: the Clerk reaches the
// generation the other Distributor serves. It used to wait on the silent
// stream for ever.
func TestSilentDistributorIsLeftForTheNext(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first func(t *testing.T) []byte
	}{
		{"mid-message", func(t *testing.T) []byte {
			// A length prefix promising 100 bytes, then 10 of them.
			return envelope(make([]byte, 100))[:15]
		}},
		{"after-a-generation", func(t *testing.T) []byte { return wholeMessage(t, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			silent := newStallingDistributor(t, 50*time.Millisecond, tc.first(t), 0)
			next := newServer(t)
			next.Publish(clerktest.Uniform(job, 2, tasks, 5))
			// The silent Distributor alone until its stream is open, so
			// the Clerk is on it first.
			var both atomic.Bool
			cfg := testConfig()
			cfg.SubsetSize = 0
			cfg.Resolver = func() ([]string, []string) {
				if both.Load() {
					return []string{silent.ln.Addr().String(), next.Addr()}, nil
				}
				return []string{silent.ln.Addr().String()}, nil
			}
			c := start(t, cfg)
			testwait.For(t, "a stream on the silent Distributor", func() bool { return silent.opens.Load() > 0 })
			both.Store(true)
			waitGen(t, c, 2)
		})
	}
}

// A Distributor that announced heartbeats and sends them keeps the
// Clerk's stream however long no generation goes out.
func TestHeartbeatsKeepAnIdleStream(t *testing.T) {
	// Heartbeats far more often than announced: the stream is never
	// silent for HeartbeatMisses intervals, however the test is scheduled.
	d := newStallingDistributor(t, 200*time.Millisecond, wholeMessage(t, 1), 5*time.Millisecond)
	cfg := testConfig(d.ln.Addr().String())
	cfg.SubsetSize = 0
	c := start(t, cfg)
	waitGen(t, c, 1)
	// Twice HeartbeatMisses announced intervals at least: a ticker of
	// 5ms sends at most 40 heartbeats per announced 200ms.
	want := int64(2 * api.HeartbeatMisses * 40)
	testwait.For(t, strconv.FormatInt(want, 10)+" heartbeats", func() bool { return d.beats.Load() >= want })
	if n := d.opens.Load(); n != 1 {
		t.Fatalf("the Clerk opened %d streams on a Distributor that sent heartbeats, want 1", n)
	}
}
