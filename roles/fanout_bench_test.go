package roles

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/metrics"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/roles/auth"
	"github.com/slicerd/slicerd/tlsconfig"
)

// BenchmarkFanout measures one generation's trip from the Assigner's
// commit to every subscriber of a Distributor: each iteration changes the
// job's redundancy (a new generation) and waits until all streams hold it.
// Streams share connections 100 to one, as a fleet of clients multiplexes
// them. With tls=true the whole cluster runs on mutual TLS. The agent
// keeps Prometheus metrics, as one run with --metrics-addr does.
//
//	go test -run '^$' -bench Fanout -benchtime 20x -count 5 ./roles/
func BenchmarkFanout(b *testing.B) {
	for _, secure := range []bool{false, true} {
		for _, streams := range []int{100, 1000} {
			b.Run(fmt.Sprintf("tls=%v/streams=%d", secure, streams), func(b *testing.B) { benchFanout(b, secure, streams) })
		}
	}
}

func benchFanout(b *testing.B, secure bool, streams int) {
	var pki *testPKI
	cfg := TestConfig("a1")
	cfg.DataDir = b.TempDir()
	cfg.Logger = testLogger(b)
	cfg.Registerer = metrics.NewRegistry() // as with --metrics-addr: every send is counted
	if secure {
		pki = newTestPKI(b)
		cfg.TLS = pki.source("a1", agentIDs("a1", cfg.Roles...)...)
		cfg.AdminTokens = []auth.Token{{Name: "ops", Secret: testToken}}
	}
	node := startAgent(b, cfg)
	for i := range 2 {
		var src *tlsconfig.Source
		if secure {
			src = pki.source(fmt.Sprintf("task-%d", i), identity.ID{Role: identity.Task, Job: "kv", Task: fmt.Sprintf("kv-%d", i)})
		}
		<-startTask(b, node, src, "kv", fmt.Sprintf("kv-%d", i)).Ready()
	}

	var client *tlsconfig.Source
	var admin *tlsconfig.Source
	if secure {
		client = pki.source("client", identity.ID{Role: identity.Client, Job: "kv"})
		admin = pki.source("admin", identity.ID{Role: identity.Admin, Name: "ops"})
	}
	newHTTP := func(src *tlsconfig.Source) *http.Client {
		if src == nil {
			return api.NewH2CClient()
		}
		return api.NewHTTPClient(src.ClientConfig(tlsconfig.WantAgent()))
	}
	url := api.URL(node.RPCAddr(), secure)
	jobs := slicerv1connect.NewJobServiceClient(newHTTP(admin), url)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	// Each stream counts itself in reached once it holds target.
	gens := make([]atomic.Uint64, streams)
	counted := make([]atomic.Uint64, streams)
	var target atomic.Uint64
	var reached atomic.Int64
	all := make(chan struct{}, 1)
	for c := 0; c < (streams+99)/100; c++ {
		hc := newHTTP(client)
		defer hc.CloseIdleConnections()
		dist := slicerv1connect.NewDistributorServiceClient(hc, url)
		for s := c * 100; s < min(streams, (c+1)*100); s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stream, err := dist.WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv"}))
				if err != nil {
					return
				}
				defer stream.Close()
				for stream.Receive() {
					g := stream.Msg().GetAssignment().GetGeneration()
					gens[s].Store(g)
					// Counted once per target; every iteration's change
					// reaches every stream, so one that held the target
					// early is counted on the change's own generation.
					if t := target.Load(); t > 0 && g >= t && counted[s].Swap(t) != t && reached.Add(1) == int64(streams) {
						all <- struct{}{}
					}
				}
			}()
		}
	}
	allAt := func(g uint64) bool {
		for i := range gens {
			if gens[i].Load() < g {
				return false
			}
		}
		return true
	}
	generation := func() uint64 {
		resp, err := jobs.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: "kv"}))
		if err != nil {
			b.Fatal(err)
		}
		return resp.Msg.GetJob().GetGeneration()
	}
	testwait.For(b, "every stream to hold the current assignment", func() bool {
		g := generation()
		return g > 0 && allAt(g)
	})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		reached.Store(0)
		target.Store(generation() + 1)
		red := uint32(2 - i%2) // 2, 1, 2, …: the first change differs from the start
		if _, err := jobs.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{
			Job: "kv", Config: &slicerv1.JobConfig{MinRedundancy: red, MaxRedundancy: red}})); err != nil {
			b.Fatal(err)
		}
		<-all
	}
}
