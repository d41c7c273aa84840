package assigner

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/roles/watch"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// lists reports whether a's ListJobs names job.
func lists(t *testing.T, a *Assigner, job string) bool {
	t.Helper()
	resp, err := a.ListJobs(context.Background(), connect.NewRequest(&slicerv1.ListJobsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range resp.Msg.GetJobs() {
		if j.GetName() == job {
			return true
		}
	}
	return false
}

// forgot checks that a neither lists nor gets job, and that the stream a
// was serving of it (if any) ended with NOT_FOUND.
func forgot(t *testing.T, a *Assigner, job string, streamed <-chan error) {
	t.Helper()
	if lists(t, a, job) {
		t.Errorf("%s still lists job %s after its deletion", a.self, job)
	}
	if _, err := a.GetJob(context.Background(), connect.NewRequest(&slicerv1.GetJobRequest{Job: job})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetJob of the deleted job through %s = %v, want NOT_FOUND", a.self, err)
	}
	if _, err := a.job(context.Background(), job); !errors.Is(err, rpc.ErrUnknownJob) {
		t.Errorf("%s still serves the deleted job: %v, want rpc.ErrUnknownJob", a.self, err)
	}
	if streamed != nil {
		if err := <-streamed; connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("%s's stream of the deleted job ended with %v, want NOT_FOUND", a.self, err)
		}
	}
}

// stream serves j's stream until it ends, and returns how it ended.
func stream(j *assignerJob) <-chan error {
	ended := make(chan error, 1)
	go func() {
		ended <- j.pub.Stream(context.Background(), nil, watch.Subscription{Known: j.pub.Current().Version()}, func(*watch.Message) error { return nil })
	}()
	return ended
}

// A job deleted through one Assigner is forgotten by another on one
// store as soon as it reads the job's record gone, by the store's watch
// (refresh) or its poll (refreshAll), whether the job had an assignment
// or only a configuration.
func TestDeletionReachesOtherAssigners(t *testing.T) {
	for _, tc := range []struct {
		name       string
		assignment bool
		follow     func(a *Assigner)
	}{
		{"configured only, watched", false, func(a *Assigner) { _ = a.refresh(context.Background(), "kv") }},
		{"configured only, polled", false, func(a *Assigner) { a.refreshAll(context.Background()) }},
		{"with an assignment, watched", true, func(a *Assigner) { _ = a.refresh(context.Background(), "kv") }},
		{"with an assignment, polled", true, func(a *Assigner) { a.refreshAll(context.Background()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := testStore(t)
			members := &fakeMembers{}
			deleter := testAssigner(t, testConfig(t, "a1"), store, members, nil)
			other := testAssigner(t, testConfig(t, "a2"), store, members, nil)
			if tc.assignment {
				if err := store.Commit(ctx, "kv", 0, storagetest.Assignment("kv", 1, 2, 2)); err != nil {
					t.Fatal(err)
				}
			} else if _, err := deleter.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{
				Job: "kv", Config: &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 1},
			})); err != nil {
				t.Fatal(err)
			}
			tc.follow(other)
			if !lists(t, other, "kv") {
				t.Fatal("the other assigner does not list the stored job")
			}
			var streamed <-chan error
			if tc.assignment {
				j, _ := other.known("kv")
				streamed = stream(j)
			}

			if _, err := deleter.DeleteJob(ctx, connect.NewRequest(&slicerv1.DeleteJobRequest{Job: "kv"})); err != nil {
				t.Fatal(err)
			}
			tc.follow(other)
			forgot(t, other, "kv", streamed)
			forgot(t, deleter, "kv", nil)
		})
	}
}

// An Assigner that did not see a job deleted (it started since, say)
// treats the job's failed tasks, which gossip lists until it reaps them,
// as no job: it neither shows the job nor takes it on.
func TestFailedTasksMakeNoJob(t *testing.T) {
	ctx := context.Background()
	store := testStore(t)
	members := &fakeMembers{}
	members.set("kv", "t0")
	setStatus(members, gossip.StatusFailed)
	a := testAssigner(t, testConfig(t, "a1"), store, members, nil)
	a.evaluate(ctx, true)
	if _, held := a.leader.Held("kv"); held {
		t.Error("the assigner took the lease of a job only failed tasks name")
	}
	if !a.reconcileAll(ctx) {
		t.Error("a decision failed")
	}
	forgot(t, a, "kv", nil)
	if _, err := store.Load(ctx, "kv"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the store holds a job only failed tasks name: %v", err)
	}

	// A live task creates the job afresh.
	setStatus(members, gossip.StatusAlive)
	if _, err := a.job(ctx, "kv"); err != nil {
		t.Fatalf("a job with a live task: %v", err)
	}
}

// A store read begun before a deletion and ended after it does not bring
// the deleted job back.
func TestDeletedJobNotRecreatedByStaleRead(t *testing.T) {
	ctx := context.Background()
	bolt := testStore(t)
	store := &orderedStore{Store: bolt}
	if err := bolt.Commit(ctx, "kv", 0, storagetest.Assignment("kv", 1, 2, 2)); err != nil {
		t.Fatal(err)
	}
	a := soloAssigner(t, store)
	store.afterLoad = func() {
		if _, err := a.DeleteJob(ctx, connect.NewRequest(&slicerv1.DeleteJobRequest{Job: "kv"})); err != nil {
			t.Errorf("DeleteJob: %v", err)
		}
	}
	if _, err := a.job(ctx, "kv"); !errors.Is(err, rpc.ErrUnknownJob) {
		t.Errorf("a read that began before the deletion: %v, want rpc.ErrUnknownJob", err)
	}
	if _, ok := a.known("kv"); ok {
		t.Error("a read that began before the deletion brought the job back")
	}
}

// setStatus gives every member status.
func setStatus(f *fakeMembers, status gossip.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.peers {
		f.peers[i].Status = status
	}
}

// Forgetting a deleted job stops the deadline of its pending make-before-
// break step, which would otherwise run on for a job that is gone.
func TestForgetJobStopsPendingFlip(t *testing.T) {
	ctx := context.Background()
	store := testStore(t)
	if err := store.Commit(ctx, "kv", 0, storagetest.Assignment("kv", 1, 2, 2)); err != nil {
		t.Fatal(err)
	}
	a := testAssigner(t, testConfig(t, "a1"), store, &fakeMembers{}, nil)
	j, err := a.job(ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}
	p := &pendingFlip{mid: 1, timer: time.AfterFunc(time.Hour, func() {})}
	a.mu.Lock()
	setPending(j, p)
	a.mu.Unlock()
	a.forgetJob("kv")
	if p.timer.Stop() {
		t.Error("the pending step's deadline still ran after its job was forgotten")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if j.pending != nil {
		t.Error("the forgotten job still holds its pending step")
	}
}
