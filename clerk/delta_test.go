package clerk_test

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/internal/testwait"
)

// moved returns a later generation of a with slice i given to task.
func moved(a *assign.Assignment, gen uint64, i int, task string) *assign.Assignment {
	b := &assign.Assignment{Job: a.Job, Generation: gen, Incarnation: a.Incarnation, Tasks: a.Tasks, Slices: slices.Clone(a.Slices)}
	b.Slices[i].Tasks = []string{task}
	return b
}

// startAtGeneration1 starts a server holding generation 1 (16 slices) and a
// Clerk that has it.
func startAtGeneration1(t *testing.T) (*clerktest.Server, *clerk.Clerk, *assign.Assignment) {
	t.Helper()
	srv := newServer(t)
	a1 := clerktest.Uniform(job, 1, tasks, 16)
	srv.Publish(a1)
	c := start(t, testConfig(srv.Addr()))
	waitGen(t, c, 1)
	return srv, c, a1
}

// The Clerk asks for deltas, applies them, and routes by the result.
func TestClerkAppliesDeltas(t *testing.T) {
	srv, c, a1 := startAtGeneration1(t)
	a2 := moved(a1, 2, 3, "t2")
	srv.SendDelta(job, api.ToProto(a2), api.Diff(a1, a2))
	waitGen(t, c, 2)
	checkRouting(t, c, a2)
	a3 := moved(a2, 3, 9, "t0")
	srv.SendDelta(job, api.ToProto(a3), api.Diff(a2, a3))
	waitGen(t, c, 3)
	checkRouting(t, c, a3)
	for _, r := range srv.Requests() {
		if r.GetDeltaVersion() != api.DeltaVersion {
			t.Fatalf("request %v does not ask for deltas", r)
		}
	}
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("%d streams; the deltas applied on the first", n)
	}
}

// A corrupted delta and one for another base are detected: the Clerk keeps
// routing by what it holds and watches again from nothing, which gets it
// the full assignment.
func TestClerkRepairsABadDeltaWithAFullAssignment(t *testing.T) {
	for name, spoil := range map[string]func(d *slicerv1.AssignmentDelta){
		"corrupted":    func(d *slicerv1.AssignmentDelta) { d.Slices[0].Tasks = []string{"t1"} },
		"out of order": func(d *slicerv1.AssignmentDelta) { d.BaseGeneration = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			srv, c, a1 := startAtGeneration1(t)

			a2 := moved(a1, 2, 3, "t2")
			d := proto.Clone(api.Diff(a1, a2)).(*slicerv1.AssignmentDelta)
			spoil(d)
			srv.SendDelta(job, api.ToProto(a2), d)
			waitGen(t, c, 2)
			checkRouting(t, c, a2)
			reqs := srv.Requests()
			if len(reqs) < 2 {
				t.Fatalf("%d streams; want a second one after the bad delta", len(reqs))
			}
			last := reqs[len(reqs)-1]
			if last.GetKnownGeneration() != 0 || last.GetKnownIncarnation() != "" {
				t.Fatalf("the stream after the bad delta said it holds generation %d of %q; want none, so as to get the full assignment",
					last.GetKnownGeneration(), last.GetKnownIncarnation())
			}
		})
	}
}

// A Clerk on a server that predates deltas gets full assignments and
// follows them, as before.
func TestClerkOnAServerWithoutDeltas(t *testing.T) {
	srv, c, a1 := startAtGeneration1(t)
	for g := uint64(2); g <= 5; g++ {
		srv.Publish(moved(a1, g, int(g), "t1"))
		waitGen(t, c, g)
	}
	testwait.For(t, "one stream", func() bool { return len(srv.Requests()) == 1 })
}
