package assigner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
)

// BenchmarkGetJob is JobService.GetJob (what the web UI reads on every
// refresh) for a job of n tasks, each serving about 100 slices and each
// having reported the load on them: computed is every call finding the
// job's load view aged (the reports merged and the assignment weighed
// with them), held every call within the view's age, as all but one a
// second are.
//
//	go test -run '^$' -bench GetJob -benchmem ./roles/assigner/
func BenchmarkGetJob(b *testing.B) {
	for _, n := range []int{100, 10000} {
		for _, view := range []string{"computed", "held"} {
			b.Run(fmt.Sprintf("tasks=%d/view=%s", n, view), func(b *testing.B) {
				ctx := context.Background()
				f, reqs := bigJob(b, n)
				for _, r := range reqs {
					if _, err := f.as.ReportLoad(ctx, connect.NewRequest(r)); err != nil {
						b.Fatal(err)
					}
				}
				clock := time.Unix(5000, 0)
				f.as.views.now = func() time.Time { return clock }
				req := connect.NewRequest(&slicerv1.GetJobRequest{Job: "kv"})
				if _, err := f.as.GetJob(ctx, req); err != nil { // the view held
					b.Fatal(err)
				}
				for b.Loop() {
					if view == "computed" {
						clock = clock.Add(viewMaxAge)
					}
					resp, err := f.as.GetJob(ctx, req)
					if err != nil {
						b.Fatal(err)
					}
					if got := resp.Msg.GetJob().GetReportingTasks(); got != uint32(n) {
						b.Fatalf("%d tasks reporting, want %d", got, n)
					}
				}
			})
		}
	}
}
