package watch

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/internal/batchconn"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// latestService serves WatchAssignment from one Latest.
type latestService struct {
	slicerv1connect.UnimplementedDistributorServiceHandler
	l *Latest
}

func (s latestService) WatchAssignment(ctx context.Context, req *connect.Request[slicerv1.WatchAssignmentRequest],
	stream *connect.ServerStream[slicerv1.WatchAssignmentResponse]) error {
	return s.l.Serve(ctx, nil, req, stream, nil)
}

// BenchmarkServe measures the send path alone: each iteration publishes
// a generation to one Latest served over cleartext HTTP/2 (x/net's server
// with the random write scheduler, writes coalesced by
// internal/batchconn, the handler wrapped in WithLimits with a
// send watch and the default budget, as the agent serves it), and waits
// until every connect-go subscriber, 100 streams to a connection, holds it.
// Client and server share the machine, as in bench/fanout; cpu-ns/op is
// the process's CPU time (both sides) per generation.
//
//	go test -run '^$' -bench Serve -benchtime 50x -count 10 ./roles/watch/
func BenchmarkServe(b *testing.B) {
	for _, streams := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) { benchServe(b, streams) })
	}
}

func benchServe(b *testing.B, streams int) {
	l := New()
	gen := uint64(1)
	l.Publish(pacedAssignment(gen), time.Now())
	mux := http.NewServeMux()
	mux.Handle(slicerv1connect.NewDistributorServiceHandler(latestService{l: l}, connect.WithCodec(Codec{})))
	srv := httptest.NewUnstartedServer(WithLimits(mux, NewSendWatch(10*time.Second), 64<<20))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	if err := http2.ConfigureServer(srv.Config, &http2.Server{NewWriteScheduler: func() http2.WriteScheduler { return http2.NewRandomWriteScheduler() }}); err != nil {
		b.Fatal(err)
	}
	srv.Listener = &batchconn.Listener{Listener: srv.Listener} // as the agent's RPC listener
	srv.Start()
	defer srv.Close()
	// The subscribers' garbage collection takes CPU from the server (the
	// fan-out harness runs its own so too).
	defer debug.SetGCPercent(debug.SetGCPercent(400))

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		l.stopPacing()
	}()
	var target atomic.Uint64
	var reached atomic.Int64
	all := make(chan struct{}, 1)
	target.Store(gen)
	for c := 0; c < (streams+99)/100; c++ {
		hc := api.NewH2CClient()
		defer hc.CloseIdleConnections()
		client := slicerv1connect.NewDistributorServiceClient(hc, srv.URL)
		for range min(100, streams-c*100) {
			wg.Go(func() {
				stream, err := client.WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv"}))
				if err != nil {
					return
				}
				defer stream.Close()
				for stream.Receive() {
					if stream.Msg().GetAssignment().GetGeneration() == target.Load() && reached.Add(1) == int64(streams) {
						all <- struct{}{}
					}
				}
			})
		}
	}
	<-all
	cpu0 := processCPU(b)
	b.ResetTimer()
	for range b.N {
		gen++
		reached.Store(0)
		target.Store(gen)
		l.Publish(pacedAssignment(gen), time.Now())
		<-all
	}
	b.StopTimer()
	// CPU time moves less than wall time when other work shares the machine.
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the user and system CPU time the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMillionSliceGet is what a GetAssignment call (or a JSON
// stream's send) costs for a job of a million slices over 10,000 tasks
// (storagetest.Assignment, the stores' large job): the message's
// protobuf form (Message.Proto), then its encoding into the response.
// Calls one after another share the form until a collection frees it.
//
//	go test -run '^$' -bench MillionSliceGet -benchtime 10x -benchmem ./roles/watch/
func BenchmarkMillionSliceGet(b *testing.B) {
	msg := newMessage(storagetest.Assignment("big", 1, 10_000, 100), time.Now().UnixNano(), nil)
	b.ReportAllocs()
	for b.Loop() {
		resp := &slicerv1.GetAssignmentResponse{Assignment: msg.Proto().GetAssignment()}
		if _, err := proto.Marshal(resp); err != nil {
			b.Fatal(err)
		}
	}
}
