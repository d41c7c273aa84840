package assigner

import (
	"context"
	"sync"
	"time"

	"github.com/slicerd/slicerd/api"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
)

// A store restored from an older copy (a bbolt file from a backup, an
// etcd snapshot) holds a job at a generation below the one its tasks,
// Distributors and clients hold, in the same incarnation. They ignore
// older generations of an incarnation, so they would keep the assignment
// of before the restore, and the Assigner's decisions would reach nobody,
// until the store's generations passed theirs. Tasks report the
// generation and incarnation they hold with every load report; one above
// the job's current generation in its incarnation makes the Assigner's
// next commit, taken at once, continue above it (triggerRenumber). So
// does one of the current generation whose checksum differs from the
// current assignment's: the restored store reached a generation its
// tasks hold again, with other content. An
// Assigner that ran while its store went back finds it when its next
// commit conflicts, and continues above what it held (wentBack).

// maxGenerationJump bounds how far above the job's current generation a
// task's report may move the next one. A month of commits a second is
// 2.6 million generations; a task that reports more is not believed, so
// that no task can spend the job's generations.
const maxGenerationJump = 1 << 32

// noteHeld records that task, a live task of job, reported holding
// generation gen of incarnation inc, whose checksum (api.Checksum) is sum
// (0: unknown), and asks Run for a decision on the job when that is
// above what the store holds, or is its generation with other content: a
// decision that reaches nobody otherwise. Only the Assigner holding the
// job's lease acts on it, having checked the store: another one's view
// may lag the store, and so may the holder's for a moment after it took
// the job over. A report without an incarnation (from a slicerd that
// predates it) or of another incarnation (the store was recreated, and
// tasks take the new one as a reset) changes nothing.
func (a *Assigner) noteHeld(ctx context.Context, job, task string, gen uint64, inc string, sum uint64) {
	if _, held := a.leader.Held(job); !held {
		return
	}
	j, ok := a.known(job)
	if !ok {
		return
	}
	cur := j.pub.Current()
	if cur == nil || inc == "" || inc != cur.Incarnation || gen < cur.Generation {
		return
	}
	if gen == cur.Generation {
		if sum == 0 || sum == a.checksumOf(j, cur) {
			return
		}
	} else if gen-cur.Generation > maxGenerationJump {
		a.log.Warn("a task reports a generation of the job too far above the stored one to believe; ignored",
			"job", job, "task", task, "task_generation", gen, "stored_generation", cur.Generation, "most", maxGenerationJump)
		return
	}
	a.mu.Lock()
	known := gen > cur.Generation && gen <= j.ahead || gen == cur.Generation && (j.otherContent == cur || j.checked == cur)
	a.mu.Unlock()
	if known {
		return
	}
	// The store is the judge: a view behind it explains a newer
	// generation, and is brought up to it.
	rec, err := storage.LoadCurrent(ctx, a.store, job)
	if err != nil || rec.Current == nil {
		return
	}
	if stored := rec.Current; stored.Incarnation != inc || stored.Generation > gen ||
		stored.Generation == gen && (gen > cur.Generation || sum == api.Checksum(stored)) {
		if stored.Version().Supersedes(cur.Version()) {
			j.pub.Publish(stored, time.Time{})
		} else {
			// cur stays as it is (the store has its generation): the
			// reports of this generation are not checked again, so that
			// each does not cost a read of the store.
			a.mu.Lock()
			j.checked = cur
			a.mu.Unlock()
		}
		return
	}
	a.mu.Lock()
	if gen > cur.Generation {
		j.ahead = max(j.ahead, gen)
	} else {
		j.otherContent = cur
	}
	a.mu.Unlock()
	a.log.Warn("a task holds a newer generation of the job than the store, or the same generation with other content: the store went back (restored from an older copy?); the next commit continues above it",
		"job", job, "task", task, "task_generation", gen, "stored_generation", cur.Generation, "incarnation", inc)
	select {
	case a.aheads <- job:
	default: // the next decision renumbers anyway
	}
}

// wentBack handles stored, the job's record read after a commit
// conflicted, when it is of the incarnation of the assignment j serves and
// of an earlier generation: the store went back under this Assigner (an
// etcd cluster restored from a snapshot while the Assigner ran). The
// Assigner then continues as one started on the restored store that heard
// of the generation it served: j serves stored, and the next commit, the
// one being retried, continues above the generation served before. It
// reports whether stored was such a record; any other is published as
// usual.
func (a *Assigner) wentBack(job string, j *assignerJob, stored *assign.Assignment) bool {
	held := j.pub.Current()
	if held == nil || stored.Incarnation != held.Incarnation || stored.Generation >= held.Generation {
		return false
	}
	a.log.Warn("the store holds an older generation of the job than this assigner committed or read: the store went back (restored from an older copy?); the next commit continues above it",
		"job", job, "held_generation", held.Generation, "stored_generation", stored.Generation, "incarnation", held.Incarnation)
	a.mu.Lock()
	j.ahead = max(j.ahead, held.Generation)
	a.mu.Unlock()
	j.pub.Rewind(stored)
	return true
}

// aheadOf returns the generation j's next commit must be above, when cur
// is not: the highest a task of j reported holding above cur's
// (noteHeld), or that this Assigner held (wentBack), or cur's own when a
// task holds that generation with other content. It returns 0 when cur
// is past them.
func (a *Assigner) aheadOf(j *assignerJob, cur *assign.Assignment) uint64 {
	if cur == nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case j.ahead > cur.Generation:
		return j.ahead
	case j.otherContent == cur:
		return cur.Generation
	}
	return 0
}

// assignmentSum is api.Checksum of one assignment, computed once.
type assignmentSum struct {
	of    *assign.Assignment
	once  sync.Once
	value uint64
}

// checksumOf returns api.Checksum of cur, j's current assignment,
// computed once per assignment: the first report of each generation pays
// for it (1.5 ms per 10,000 slices on a busy 2-core machine:
// BenchmarkChecksum in package api), and the job's other
// reports, which arrive together after a commit, wait for it rather than
// hash it again each.
func (a *Assigner) checksumOf(j *assignerJob, cur *assign.Assignment) uint64 {
	a.mu.Lock()
	s := j.sum
	if s == nil || s.of != cur {
		s = &assignmentSum{of: cur}
		j.sum = s
	}
	a.mu.Unlock()
	s.once.Do(func() { s.value = api.Checksum(cur) })
	return s.value
}
