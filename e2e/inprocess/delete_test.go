package inprocess

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/internal/clustertest"
	"github.com/slicerd/slicerd/internal/testlog"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/roles"
	"github.com/slicerd/slicerd/storage"
)

// A deletion sent to either of two Assigners sharing etcd reaches the
// job's preferred one, and every Assigner, Distributor and Backup forgets
// the job: their streams end with NOT_FOUND and no Assigner lists it. The
// Assigner the call reached, and only it, logs the audit line.
func TestDeleteJobAcrossAssigners(t *testing.T) {
	for _, through := range []string{"preferred", "other"} {
		t.Run("through the "+through+" assigner", func(t *testing.T) {
			ctx := context.Background()
			opts := storeOptions(t)
			logs := map[string]*logLines{"a1": {}, "a2": {}}
			opts.Configure = func(cfg *roles.Config) {
				cfg.Logger = slog.New(slog.NewJSONHandler(logs[cfg.NodeName], nil))
			}
			c := clustertest.New(t, opts)
			c.StartAgent("a1")
			c.StartAgent("a2")
			task := c.StartTask("kv", "t0")
			preferred := c.WaitConverged("kv")
			other := "a1"
			if preferred == "a1" {
				other = "a2"
			}
			c.WaitGeneration("kv", 1)

			hc := api.NewH2CClient()
			defer hc.CloseIdleConnections()
			// Streams of the job from every role of both agents.
			type stream struct {
				what string
				errs chan error
			}
			var streams []stream
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			for _, name := range []string{"a1", "a2"} {
				url := api.RPCURL(c.Agent(name).Addr())
				req := &slicerv1.WatchAssignmentRequest{Job: "kv"}
				for what, open := range map[string]func() (*connect.ServerStreamForClient[slicerv1.WatchAssignmentResponse], error){
					"assigner": func() (*connect.ServerStreamForClient[slicerv1.WatchAssignmentResponse], error) {
						return slicerv1connect.NewAssignerServiceClient(hc, url).WatchAssignment(sctx, connect.NewRequest(req))
					},
					"distributor": func() (*connect.ServerStreamForClient[slicerv1.WatchAssignmentResponse], error) {
						return slicerv1connect.NewDistributorServiceClient(hc, url).WatchAssignment(sctx, connect.NewRequest(req))
					},
					"backup": func() (*connect.ServerStreamForClient[slicerv1.WatchAssignmentResponse], error) {
						return slicerv1connect.NewBackupServiceClient(hc, url).WatchAssignment(sctx, connect.NewRequest(req))
					},
				} {
					s, err := open()
					if err != nil {
						t.Fatalf("%s of %s: %v", what, name, err)
					}
					if !s.Receive() {
						t.Fatalf("%s of %s sent no assignment: %v", what, name, s.Err())
					}
					errs := make(chan error, 1)
					go func() {
						defer s.Close()
						for s.Receive() {
						}
						errs <- s.Err()
					}()
					streams = append(streams, stream{what + " of " + name, errs})
				}
			}

			task.Stop()
			to := preferred
			if through == "other" {
				to = other
			}
			jobs := slicerv1connect.NewJobServiceClient(hc, api.RPCURL(c.Agent(to).Addr()))
			testwait.For(t, "the deletion to be accepted once the task is gone", func() bool {
				_, err := jobs.DeleteJob(ctx, connect.NewRequest(&slicerv1.DeleteJobRequest{Job: "kv"}))
				if err != nil && connect.CodeOf(err) != connect.CodeFailedPrecondition {
					t.Fatalf("DeleteJob through %s: %v", to, err)
				}
				return err == nil
			})
			for _, s := range streams {
				select {
				case err := <-s.errs:
					if connect.CodeOf(err) != connect.CodeNotFound {
						t.Errorf("the %s stream ended with %v, want NOT_FOUND", s.what, err)
					}
				case <-time.After(testwait.Scale(clustertest.Timeout)):
					t.Fatalf("the %s stream of the deleted job did not end", s.what)
				}
			}
			for _, name := range []string{"a1", "a2"} {
				list, err := slicerv1connect.NewJobServiceClient(hc, api.RPCURL(c.Agent(name).Addr())).ListJobs(ctx, connect.NewRequest(&slicerv1.ListJobsRequest{}))
				if err != nil || len(list.Msg.GetJobs()) != 0 {
					t.Errorf("%s lists %v, %v after the deletion; want no job", name, list.Msg.GetJobs(), err)
				}
			}
			if _, err := c.Store().Load(ctx, "kv"); !errors.Is(err, storage.ErrNotFound) {
				t.Errorf("the store still holds the deleted job: %v", err)
			}
			for name, l := range logs {
				want := 0
				if name == to {
					want = 1
				}
				if got := l.count(`"component":"audit"`, `"procedure":"/slicer.v1.JobService/DeleteJob"`, `"outcome":"ok"`); got != want {
					t.Errorf("%s logged %d audit lines of the deletion, want %d", name, got, want)
				}
			}
		})
	}
}

// logLines collects an agent's log lines.
type logLines struct{ testlog.Buffer }

// count returns how many lines contain every one of substrs.
func (l *logLines) count(substrs ...string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		all := true
		for _, s := range substrs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}
