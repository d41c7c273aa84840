package clustertest

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/storage"
)

// shared wraps the cluster's store for one agent: the agent's Close leaves
// it open for the others (the cluster closes it at the end of the test),
// and a store that can watch keeps that ability.
func shared(s storage.Store) storage.Store {
	if w, ok := s.(watcher); ok {
		return sharedWatcher{sharedStore{s}, w}
	}
	return sharedStore{s}
}

type watcher interface {
	Watch(ctx context.Context, job string) <-chan string
}

type sharedStore struct{ storage.Store }

// Close does nothing: the store outlives the agent.
func (sharedStore) Close() error { return nil }

// CommitFenced passes a fenced commit on to the shared store.
func (s sharedStore) CommitFenced(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment) error {
	return fencer(s.Store).CommitFenced(ctx, job, epoch, prevGen, next)
}

// CommitRecorded passes a recorded commit on to the shared store.
func (s sharedStore) CommitRecorded(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment, e storage.HistoryEntry) error {
	return commitRecorded(s.Store, ctx, job, epoch, prevGen, next, e)
}

// History reads the shared store's history of job.
func (s sharedStore) History(ctx context.Context, job string, limit int) ([]storage.HistoryEntry, error) {
	return history(s.Store, ctx, job, limit)
}

// commitRecorded is s's recorded commit, or its fenced commit when it
// keeps no history.
func commitRecorded(s storage.Store, ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment, e storage.HistoryEntry) error {
	if h, ok := s.(storage.Historian); ok {
		return h.CommitRecorded(ctx, job, epoch, prevGen, next, e)
	}
	return fencer(s).CommitFenced(ctx, job, epoch, prevGen, next)
}

func history(s storage.Store, ctx context.Context, job string, limit int) ([]storage.HistoryEntry, error) {
	if h, ok := s.(storage.Historian); ok {
		return h.History(ctx, job, limit)
	}
	return nil, nil
}

// fencer is s's fenced commit; a store without one fences every commit
// out, so that a test using it fails clearly.
func fencer(s storage.Store) storage.Fencer {
	if f, ok := s.(storage.Fencer); ok {
		return f
	}
	return noFence{}
}

type noFence struct{}

func (noFence) CommitFenced(_ context.Context, job string, epoch, _ uint64, next *assign.Assignment) error {
	return storage.Fenced(job, next.Generation, 0, epoch)
}

// sharedLeases is the cluster's one embedded lease manager as an agent
// sees it: the agent's Close leaves it open for the others.
type sharedLeases struct{ lease.Manager }

func (sharedLeases) Close() error { return nil }

type sharedWatcher struct {
	sharedStore
	w watcher
}

func (s sharedWatcher) Watch(ctx context.Context, job string) <-chan string {
	return s.w.Watch(ctx, job)
}

func isNotFound(err error) bool { return errors.Is(err, storage.ErrNotFound) }

// Commit is one successful conditional commit, as the committing agent's
// store reported it.
type Commit struct {
	Agent      string
	Job        string
	PrevGen    uint64
	Generation uint64
	// Epoch is the job lease's epoch the commit was fenced by, 0 for an
	// unfenced commit (made by a test, never by an Assigner).
	Epoch uint64
	Tasks []string
	At    time.Time
}

// recording wraps an agent's store and logs every successful commit.
type recording struct {
	storage.Store
	agent string
	c     *Cluster
}

func (r recording) Commit(ctx context.Context, job string, prevGen uint64, next *assign.Assignment) error {
	err := r.Store.Commit(ctx, job, prevGen, next)
	if err == nil {
		r.log(job, 0, prevGen, next)
	}
	return err
}

func (r recording) CommitFenced(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment) error {
	err := fencer(r.Store).CommitFenced(ctx, job, epoch, prevGen, next)
	if err == nil {
		r.log(job, epoch, prevGen, next)
	}
	return err
}

func (r recording) CommitRecorded(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment, e storage.HistoryEntry) error {
	err := commitRecorded(r.Store, ctx, job, epoch, prevGen, next, e)
	if err == nil {
		r.log(job, epoch, prevGen, next)
	}
	return err
}

func (r recording) History(ctx context.Context, job string, limit int) ([]storage.HistoryEntry, error) {
	return history(r.Store, ctx, job, limit)
}

func (r recording) log(job string, epoch, prevGen uint64, next *assign.Assignment) {
	names := make([]string, len(next.Tasks))
	for i, t := range next.Tasks {
		names[i] = t.Name
	}
	r.c.mu.Lock()
	r.c.commits = append(r.c.commits, Commit{Agent: r.agent, Job: job, PrevGen: prevGen, Generation: next.Generation,
		Epoch: epoch, Tasks: names, At: time.Now()})
	r.c.mu.Unlock()
}

type recordingWatcher struct {
	recording
	w watcher
}

func (r recordingWatcher) Watch(ctx context.Context, job string) <-chan string {
	return r.w.Watch(ctx, job)
}

// record wraps an agent's store so its commits are logged, keeping a
// store's ability to watch.
func (c *Cluster) record(agent string, s storage.Store) storage.Store {
	r := recording{Store: s, agent: agent, c: c}
	if w, ok := s.(watcher); ok {
		return recordingWatcher{r, w}
	}
	return r
}

// Commits returns every successful commit of job by any agent, in the
// order they returned.
func (c *Cluster) Commits(job string) []Commit {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Commit
	for _, cm := range c.commits {
		if cm.Job == job {
			out = append(out, cm)
		}
	}
	return out
}

// CheckEpochs fails the test unless job's history shows one writer at a
// time: every commit by an Assigner fenced by a job lease, every epoch
// held by one Assigner, and epochs never going back along the
// generations.
func (c *Cluster) CheckEpochs(job string) {
	c.t.Helper()
	commits := slices.Clone(c.Commits(job))
	slices.SortFunc(commits, func(x, y Commit) int { return cmp.Compare(x.Generation, y.Generation) })
	holder := map[uint64]string{}
	var last uint64
	for _, cm := range commits {
		if cm.Epoch == 0 {
			c.t.Errorf("generation %d of %s was committed by %s without a job lease", cm.Generation, job, cm.Agent)
			continue
		}
		if h, ok := holder[cm.Epoch]; ok && h != cm.Agent {
			c.t.Errorf("epoch %d of %s committed by both %s and %s", cm.Epoch, job, h, cm.Agent)
		}
		holder[cm.Epoch] = cm.Agent
		if cm.Epoch < last {
			c.t.Errorf("generation %d of %s was committed under epoch %d, after epoch %d", cm.Generation, job, cm.Epoch, last)
		}
		last = max(last, cm.Epoch)
	}
}

// CheckHistory fails the test unless job's commits form one chain: every
// generation committed exactly once, each on top of the one before it, so
// the stored generation never went backwards and no commit was lost; and
// the store holds the last of them.
func (c *Cluster) CheckHistory(job string) {
	c.t.Helper()
	// The recorder logs a commit once the store has taken it, so a commit
	// under way can be in the store and not yet in the log, or one can
	// land between the two reads: compare a log and a store that held
	// still across the reads, waiting a little for an Assigner still
	// committing. A store that never holds the last logged commit (one
	// overwrote another) fails below.
	var commits []Commit
	var rec storage.Record
	testwait.Poll(c.t, 10*time.Second, func() bool {
		before := c.Record(job)
		commits = c.Commits(job)
		rec = c.Record(job)
		if before.Generation() != rec.Generation() {
			return false
		}
		last := uint64(0)
		for _, cm := range commits {
			last = max(last, cm.Generation)
		}
		return rec.Current != nil && last == rec.Current.Generation
	})
	sorted := slices.Clone(commits)
	slices.SortFunc(sorted, func(x, y Commit) int { return cmp.Compare(x.Generation, y.Generation) })
	for i, cm := range sorted {
		if i > 0 && cm.Generation == sorted[i-1].Generation {
			c.t.Errorf("generation %d of %s committed twice: by %s and by %s", cm.Generation, job, sorted[i-1].Agent, cm.Agent)
		}
		if i > 0 && cm.PrevGen != sorted[i-1].Generation {
			c.t.Errorf("generation %d of %s (by %s) was committed on generation %d, but the one before it is %d: a commit was lost",
				cm.Generation, job, cm.Agent, cm.PrevGen, sorted[i-1].Generation)
		}
	}
	if len(sorted) == 0 {
		return
	}
	last := sorted[len(sorted)-1]
	if rec.Current == nil || rec.Current.Generation != last.Generation {
		c.t.Errorf("the store holds generation %d of %s, but the last commit was %d", rec.Generation(), job, last.Generation)
	}
}
