package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// The commit in pieces (chunks.go) promises that a reader never finds a
// head whose pieces are missing or differ, whatever step a committer dies
// or stalls at, and that the pieces no head names are collected. These
// tests stop a commit at every one of its steps (its reads, each piece's
// put, the switch, and after the switch), as a crash and as a pause while
// another committer overtakes it, fenced on the job lease or not, and
// check the store after each, and its whole history of heads at the end.

// steps lists every step of a commit of an assignment of n pieces.
func steps(n int) []step {
	out := []step{{"read", -1}}
	for i := range n {
		out = append(out, step{"piece", i})
	}
	return append(out, step{"switch", -1}, step{"switched", -1})
}

type step struct {
	name  string
	piece int
}

func (s step) String() string {
	if s.piece >= 0 {
		return fmt.Sprintf("%s-%d", s.name, s.piece)
	}
	return s.name
}

// setHook installs f as the commit hook for the test's duration.
func setHook(t *testing.T, f func(job, step string, piece int) error) {
	commitHook = f
	t.Cleanup(func() { commitHook = nil })
}

var crashPrefixes atomic.Int64

func openTest(t *testing.T, srv *etcdtest.Server, prefix string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{Endpoints: []string{srv.Endpoint()}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// bigAssignment is an assignment of 60,000 slices, about 620 KB: two
// pieces.
func bigAssignment(gen uint64) *assign.Assignment {
	return storagetest.Assignment("big", gen, 600, 100)
}

// commitNext loads the job and commits the next generation, fenced on
// epoch unless it is 0.
func commitNext(t *testing.T, s *Store, epoch uint64) uint64 {
	t.Helper()
	ctx := context.Background()
	rec, err := s.Load(ctx, "big")
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Load before a commit: %v", err)
	}
	next := bigAssignment(rec.Generation() + 1)
	if epoch == 0 {
		err = s.Commit(ctx, "big", rec.Generation(), next)
	} else {
		err = s.CommitFenced(ctx, "big", epoch, rec.Generation(), next)
	}
	if err != nil {
		t.Fatalf("commit of generation %d: %v", next.Generation, err)
	}
	return next.Generation
}

// checkStore loads the job from a client of its own and checks it is
// generation want (0: any) and, when tidy, that the only pieces stored
// are those its heads name.
func checkStore(t *testing.T, srv *etcdtest.Server, prefix string, want uint64, tidy bool) {
	t.Helper()
	s := openTest(t, srv, prefix)
	rec, err := s.Load(context.Background(), "big")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if want != 0 && rec.Generation() != want {
		t.Fatalf("loaded generation %d, want %d", rec.Generation(), want)
	}
	if !tidy {
		return
	}
	named, stored := namedSets(t, s), storedSets(t, s)
	if !slices.Equal(named, stored) {
		t.Fatalf("pieces stored for sets %v; the heads name %v", stored, named)
	}
}

func namedSets(t *testing.T, s *Store) []string {
	t.Helper()
	resp, err := s.cli.Get(context.Background(), s.keys.job("big"), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	raw := s.split("big", resp.Kvs)
	st, err := s.decodeStored("big", raw)
	if err != nil {
		t.Fatal(err)
	}
	out := st.sets()
	slices.Sort(out)
	return out
}

func storedSets(t *testing.T, s *Store) []string {
	t.Helper()
	resp, err := s.cli.Get(context.Background(), s.keys.chunks("big"), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		if set, ok := s.keys.setOf("big", kv.Key); ok {
			out = append(out, set)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// checkHistory walks every value the job's current key ever held and
// checks that the generations only grew and that each head's pieces were
// all there, matching it, at the revision it was written.
func checkHistory(t *testing.T, srv *etcdtest.Server, prefix string) {
	t.Helper()
	ctx := context.Background()
	s := openTest(t, srv, prefix)
	key := s.keys.current("big")
	var gens []uint64
	rev := int64(0)
	for {
		opts := []clientv3.OpOption{}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.cli.Get(ctx, key, opts...)
		if err != nil {
			t.Fatalf("read %s at revision %d: %v", key, rev, err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		kv := resp.Kvs[0]
		enc := kv.Value
		if isHead(enc) {
			h, err := decodeHead(enc)
			if err != nil {
				t.Fatalf("the head written at revision %d: %v", kv.ModRevision, err)
			}
			if enc, err = s.readSet(ctx, "big", h, kv.ModRevision); err != nil {
				t.Fatalf("the pieces of the head written at revision %d: %v", kv.ModRevision, err)
			}
		}
		a, err := storage.DecodeAssignment("big", "current", enc)
		if err != nil {
			t.Fatalf("the assignment written at revision %d: %v", kv.ModRevision, err)
		}
		gens = append(gens, a.Generation)
		rev = kv.ModRevision - 1
	}
	slices.Reverse(gens)
	for i := 1; i < len(gens); i++ {
		if gens[i] <= gens[i-1] {
			t.Fatalf("the current generations went %v", gens)
		}
	}
}

// pieceCount is the number of pieces bigAssignment is stored in.
func pieceCount(t *testing.T) int {
	enc, err := storage.EncodeAssignment(bigAssignment(2))
	if err != nil {
		t.Fatal(err)
	}
	return (len(enc) + chunkBytes - 1) / chunkBytes
}

// TestCommitCrashAtEveryStep: a committer that dies at any step leaves a
// job that loads, at the old generation or (once switched) the new; the
// next committer's commits collect what it left.
func TestCommitCrashAtEveryStep(t *testing.T) {
	srv := etcdtest.Start(t)
	for _, at := range steps(pieceCount(t)) {
		t.Run(at.String(), func(t *testing.T) {
			prefix := fmt.Sprintf("/crash-%d/", crashPrefixes.Add(1))
			a, b := openTest(t, srv, prefix), openTest(t, srv, prefix)
			commitNext(t, a, 0)
			var fired atomic.Bool
			setHook(t, func(job, name string, piece int) error {
				if name == at.name && piece == at.piece && fired.CompareAndSwap(false, true) {
					return errCrashed
				}
				return nil
			})
			err := a.Commit(context.Background(), "big", 1, bigAssignment(2))
			if !errors.Is(err, errCrashed) {
				t.Fatalf("the crashed commit returned %v", err)
			}
			want := uint64(1)
			if at.name == "switched" {
				want = 2
			}
			checkStore(t, srv, prefix, want, false)
			commitNext(t, b, 0)
			commitNext(t, b, 0)
			checkStore(t, srv, prefix, want+2, true)
			checkHistory(t, srv, prefix)
		})
	}
}

// TestCommitPausedAtEveryStep: a committer paused at any step while
// another commits twice (fenced on the job lease, which passes to the
// other, or not) fails when it resumes, unless it had switched already;
// either way the job loads, and what it wrote is gone by the end.
func TestCommitPausedAtEveryStep(t *testing.T) {
	srv := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	for _, fenced := range []bool{false, true} {
		for _, at := range steps(pieceCount(t)) {
			t.Run(fmt.Sprintf("fenced=%v/%s", fenced, at), func(t *testing.T) {
				ctx := context.Background()
				prefix := fmt.Sprintf("/pause-%d/", crashPrefixes.Add(1))
				a, b := openTest(t, srv, prefix), openTest(t, srv, prefix)
				grant := func() uint64 {
					key := a.JobLeaseKey("big")
					if _, err := cli.Delete(ctx, key); err != nil {
						t.Fatal(err)
					}
					resp, err := cli.Put(ctx, key, "holder")
					if err != nil {
						t.Fatal(err)
					}
					return uint64(resp.Header.Revision)
				}
				var epochA, epochB uint64
				if fenced {
					epochA = grant()
				}
				commitNext(t, a, epochA)

				paused, resume := make(chan struct{}), make(chan struct{})
				var once sync.Once
				setHook(t, func(job, name string, piece int) error {
					if name == at.name && piece == at.piece {
						first := false
						once.Do(func() { first = true })
						if first {
							close(paused)
							<-resume
						}
					}
					return nil
				})
				done := make(chan error, 1)
				go func() {
					var err error
					if fenced {
						err = a.CommitFenced(ctx, "big", epochA, 1, bigAssignment(2))
					} else {
						err = a.Commit(ctx, "big", 1, bigAssignment(2))
					}
					done <- err
				}()
				<-paused
				passed := int64(0)
				if fenced {
					epochB = grant()
					passed = int64(epochB)
				}
				commitNext(t, b, epochB)
				commitNext(t, b, epochB)
				close(resume)
				err := <-done
				switch {
				case at.name == "switched" && err != nil:
					t.Fatalf("a commit paused after its switch returned %v", err)
				case at.name != "switched" && fenced && !errors.Is(err, storage.ErrFenced):
					t.Fatalf("the overtaken commit returned %v, want ErrFenced", err)
				case at.name != "switched" && !fenced && !errors.Is(err, storage.ErrConflict):
					t.Fatalf("the overtaken commit returned %v, want ErrConflict", err)
				}
				if fenced && at.name != "switched" {
					// Not one piece of the deposed committer was put
					// after the lease passed.
					resp, err := cli.Get(ctx, a.keys.chunks("big"), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(0))
					if err != nil {
						t.Fatal(err)
					}
					named := namedSets(t, b)
					for _, kv := range resp.Kvs {
						set, _ := a.keys.setOf("big", kv.Key)
						if kv.CreateRevision > passed && !slices.Contains(named, set) {
							t.Fatalf("piece %s was put at revision %d, after the lease passed at %d", kv.Key, kv.CreateRevision, passed)
						}
					}
				}
				// One more commit collects any set the overtaken one
				// could not delete.
				commitNext(t, b, epochB)
				checkStore(t, srv, prefix, 0, true)
				checkHistory(t, srv, prefix)
			})
		}
	}
}

// TestCommitRacingDeleteOfAConfiguredJob: a first commit of a large
// assignment to a job that has a configuration only, overtaken between
// its pieces and its switch by a Delete (which removes the pieces and
// leaves the generation at 0), writes its pieces again rather than switch
// to the ones deleted.
func TestCommitRacingDeleteOfAConfiguredJob(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("/delete-%d/", crashPrefixes.Add(1))
	a, b := openTest(t, srv, prefix), openTest(t, srv, prefix)
	if err := a.SetConfig(ctx, "big", assign.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	setHook(t, func(job, name string, piece int) error {
		if name == "switch" {
			once.Do(func() {
				close(paused)
				<-resume
			})
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- a.Commit(ctx, "big", 0, bigAssignment(1)) }()
	<-paused
	if err := b.Delete(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatalf("the commit overtaken by the Delete: %v", err)
	}
	checkStore(t, srv, prefix, 1, true)
	checkHistory(t, srv, prefix)
}

// TestDeleteOvertakingACommitLeavesNoPieces: a Delete that overtakes a
// commit between its pieces removes the pieces put before it, and no
// piece put after it lands, so nothing of the deleted job is left in
// etcd even when the committer dies right after (here: at its next step,
// before it could delete its own pieces). A piece's put that landed after
// the Delete would be an orphan no commit of the job collects: the job is
// gone, and Delete says it is not found.
func TestDeleteOvertakingACommitLeavesNoPieces(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	for _, epoch := range []uint64{0, 1} {
		t.Run(fmt.Sprintf("fenced=%v", epoch != 0), func(t *testing.T) {
			prefix := fmt.Sprintf("/delete-%d/", crashPrefixes.Add(1))
			a, b := openTest(t, srv, prefix), openTest(t, srv, prefix)
			if epoch != 0 {
				epoch = holdLease(t, a, "big")
			}
			commitNext(t, a, epoch)
			paused, resume := make(chan struct{}), make(chan struct{})
			var once sync.Once
			var reads atomic.Int32
			setHook(t, func(job, name string, piece int) error {
				switch {
				case name == "piece" && piece == 1:
					once.Do(func() { close(paused); <-resume })
				case name == "read" && reads.Add(1) > 1, name == "switch":
					return errCrashed // the committer dies at its next step
				}
				return nil
			})
			done := make(chan error, 1)
			go func() {
				if epoch == 0 {
					done <- a.Commit(ctx, "big", 1, bigAssignment(2))
				} else {
					done <- a.CommitFenced(ctx, "big", epoch, 1, bigAssignment(2))
				}
			}()
			<-paused
			if err := b.Delete(ctx, "big"); err != nil {
				t.Fatal(err)
			}
			close(resume)
			if err := <-done; !errors.Is(err, errCrashed) {
				t.Fatalf("the commit: %v, want it to stop at its next step", err)
			}
			resp, err := b.cli.Get(ctx, b.keys.chunksDir(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range resp.Kvs {
				t.Errorf("a piece of the deleted job is left: %s", kv.Key)
			}
			if err := b.Delete(ctx, "big"); !errors.Is(err, storage.ErrNotFound) {
				t.Errorf("Delete again: %v, want not found", err)
			}
		})
	}
}

// TestDeleteKeepsAReadableGeneration: deleting a job records the
// generation it was deleted at from whichever of its current and previous
// heads can be read, so that the job created again continues above the
// generation its subscribers hold (they ignore a lower one), even when the
// other head is corrupt: deleting is what the corrupt-data error tells an
// operator to do.
func TestDeleteKeepsAReadableGeneration(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	for _, corrupt := range []string{leafPrevious, leafCurrent} {
		t.Run(corrupt, func(t *testing.T) {
			prefix := fmt.Sprintf("/floor-%d/", crashPrefixes.Add(1))
			s := openTest(t, srv, prefix)
			for range 5 {
				commitNext(t, s, 0)
			}
			if _, err := s.cli.Put(ctx, s.keys.job("big")+corrupt, headMagic+"\x01"); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(ctx, "big"); err != nil {
				t.Fatal(err)
			}
			if err := s.Commit(ctx, "big", 0, bigAssignment(1)); err != nil {
				t.Fatal(err)
			}
			rec, err := s.Load(ctx, "big")
			if err != nil {
				t.Fatal(err)
			}
			if rec.Generation() <= 5 {
				t.Errorf("deleted at generation 5 with its %s head corrupt, created again at generation %d: not above it", corrupt, rec.Generation())
			}
		})
	}
}

// holdLease puts job's lease key as a holder would and returns its create
// revision: the epoch that fences commits on it.
func holdLease(t *testing.T, s *Store, job string) uint64 {
	t.Helper()
	resp, err := s.cli.Put(context.Background(), s.JobLeaseKey(job), "holder")
	if err != nil {
		t.Fatal(err)
	}
	return uint64(resp.Header.Revision)
}

// TestHeadsNamingOneSetAreCorrupt: current and previous heads that name
// the same pieces (only corrupt data can) are refused as corrupt by Load
// and by a commit, which would otherwise delete those pieces with the
// previous head while it made the current one previous.
func TestHeadsNamingOneSetAreCorrupt(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("/sameset-%d/", crashPrefixes.Add(1))
	s := openTest(t, srv, prefix)
	commitNext(t, s, 0)
	commitNext(t, s, 0)
	resp, err := s.cli.Get(ctx, s.keys.current("big"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeHead(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	h.generation--
	if _, err := s.cli.Put(ctx, s.keys.previous("big"), string(encodeHead(h))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "big"); !errors.Is(err, storage.ErrCorrupt) {
		t.Errorf("Load: %v, want corrupt", err)
	}
	if err := s.Commit(ctx, "big", 2, bigAssignment(3)); !errors.Is(err, storage.ErrCorrupt) {
		t.Errorf("Commit: %v, want corrupt", err)
	}
	if got := storedSets(t, s); !slices.Contains(got, h.set) {
		t.Errorf("the pieces both heads name are gone: stored sets %v", got)
	}
}
