package etcdstore_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/etcdstore"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// large is an assignment of 10^5 slices, about 1.1 MB encoded: too large
// for one value, so stored in pieces.
func large(job string, gen uint64) *assign.Assignment {
	return storagetest.Assignment(job, gen, 1000, 100)
}

// pieces lists the pieces stored for job, by set.
func pieces(t *testing.T, cli *clientv3.Client, s *etcdstore.Store, job string) map[string]int {
	t.Helper()
	dir := s.Prefix() + "chunks/" + job + "/"
	resp, err := cli.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, kv := range resp.Kvs {
		set, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), dir), "/")
		out[set]++
	}
	return out
}

func sets(m map[string]int) []string {
	var out []string
	for set := range m {
		out = append(out, set)
	}
	slices.Sort(out)
	return out
}

// TestChunkedLayout: a large assignment is a head under jobs/ and pieces
// under chunks/; a job keeps at most the sets of its current and previous
// assignments; a set no head names is collected by the next commit; and
// Delete removes them all.
func TestChunkedLayout(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := rawClient(t, srv)
	s := openAt(t, srv, etcdstore.Options{})
	enc, _ := storage.EncodeAssignment(large("big", 1))
	want := (len(enc) + 512<<10 - 1) / (512 << 10)

	if err := s.Commit(ctx, "big", 0, large("big", 1)); err != nil {
		t.Fatal(err)
	}
	if cur := rawGet(t, cli, s.Prefix()+"jobs/big/current"); !strings.HasPrefix(cur, "SLCH") || len(cur) > 64 {
		t.Fatalf("the current value of a %d-byte assignment is %d bytes starting %q, want a head", len(enc), len(cur), cur[:min(len(cur), 4)])
	}
	p := pieces(t, cli, s, "big")
	if len(p) != 1 || p[sets(p)[0]] != want {
		t.Fatalf("pieces after the first commit: %v, want one set of %d", p, want)
	}
	first := sets(p)[0]
	for g := uint64(2); g <= 3; g++ {
		if err := s.Commit(ctx, "big", g-1, large("big", g)); err != nil {
			t.Fatal(err)
		}
	}
	p = pieces(t, cli, s, "big")
	if len(p) != 2 || p[first] != 0 {
		t.Fatalf("pieces after three commits: %v, want the two sets of generations 2 and 3", p)
	}

	// A set no head names, as a committer that died leaves, goes with
	// the next commit.
	orphan := "0123456789abcdef"
	rawPut(t, cli, s.Prefix()+"chunks/big/"+orphan+"/00000000", "piece")
	if err := s.Commit(ctx, "big", 3, large("big", 4)); err != nil {
		t.Fatal(err)
	}
	if p = pieces(t, cli, s, "big"); len(p) != 2 || p[orphan] != 0 {
		t.Fatalf("pieces after a commit with an orphan: %v, want the two named sets only", p)
	}
	if err := s.Commit(ctx, "big", 4, large("big", 5)); err != nil {
		t.Fatal(err)
	}
	rec := mustLoad(t, s, "big")
	if !storagetest.Same(rec.Current, large("big", 5)) || !storagetest.Same(rec.Previous, large("big", 4)) {
		t.Fatalf("loaded %v after %v, want 5 after 4", rec.Current.Version(), rec.Previous.Version())
	}

	if err := s.Delete(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	if p = pieces(t, cli, s, "big"); len(p) != 0 {
		t.Fatalf("pieces after Delete: %v", p)
	}
}

// TestChunkedConcurrentCommits: of two stores committing large
// assignments on the same generation, one wins, the other conflicts, and
// the loser's pieces are gone.
func TestChunkedConcurrentCommits(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := rawClient(t, srv)
	s := openAt(t, srv, etcdstore.Options{})
	p := openAt(t, srv, etcdstore.Options{Prefix: s.Prefix()})
	if err := s.Commit(ctx, "big", 0, large("big", 1)); err != nil {
		t.Fatal(err)
	}
	for round := uint64(1); round <= 4; round++ {
		var (
			wg   sync.WaitGroup
			errs [2]error
		)
		for i, st := range []*etcdstore.Store{s, p} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = st.Commit(ctx, "big", round, large("big", round+1))
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, storage.ErrConflict):
				t.Fatalf("round %d: %v, want a win or ErrConflict", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d commits won (%v)", round, won, errs)
		}
		if got := pieces(t, cli, s, "big"); len(got) != 2 {
			t.Fatalf("round %d: pieces %v, want the sets of current and previous only", round, got)
		}
	}
	if rec := mustLoad(t, p, "big"); rec.Generation() != 5 || rec.Previous.Generation != 4 {
		t.Fatalf("loaded %d after %v, want 5 after 4", rec.Generation(), rec.Previous.Version())
	}
}

// TestChunkedFenced: a fenced commit of a large assignment by an Assigner
// that no longer holds the lease writes no piece at all.
func TestChunkedFenced(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := rawClient(t, srv)
	s := openAt(t, srv, etcdstore.Options{})
	rawPut(t, cli, s.JobLeaseKey("big"), "assigner-b")
	resp, err := cli.Get(ctx, s.JobLeaseKey("big"))
	if err != nil {
		t.Fatal(err)
	}
	epoch := uint64(resp.Kvs[0].CreateRevision)
	err = s.CommitFenced(ctx, "big", epoch-1, 0, large("big", 1))
	if !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("CommitFenced on a stale epoch: %v, want ErrFenced", err)
	}
	if p := pieces(t, cli, s, "big"); len(p) != 0 {
		t.Fatalf("a fenced commit left pieces: %v", p)
	}
	if err := s.CommitFenced(ctx, "big", epoch, 0, large("big", 1)); err != nil {
		t.Fatalf("CommitFenced on the held epoch: %v", err)
	}
	if rec := mustLoad(t, s, "big"); !storagetest.Same(rec.Current, large("big", 1)) {
		t.Fatalf("loaded %v, want generation 1", rec.Current.Version())
	}
}

// TestChunkedCorrupt: a head that does not decode, a missing piece, and a
// piece whose bytes changed are reported as corrupt by Load, naming where;
// a commit refuses the first two (it counts pieces but does not read
// them), and nothing is overwritten.
func TestChunkedCorrupt(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := rawClient(t, srv)
	for _, tc := range []struct {
		name      string
		damage    func(s *etcdstore.Store, set string)
		load      string
		commitToo bool
		untouched string
	}{
		{"truncated head", func(s *etcdstore.Store, _ string) {
			cur := rawGet(t, cli, s.Prefix()+"jobs/big/current")
			rawPut(t, cli, s.Prefix()+"jobs/big/current", cur[:len(cur)-3])
		}, "head", true, "jobs/big/current"},
		{"missing piece", func(s *etcdstore.Store, set string) {
			if _, err := cli.Delete(ctx, s.Prefix()+"chunks/big/"+set+"/00000001"); err != nil {
				t.Fatal(err)
			}
		}, "pieces", true, "chunks/big/"},
		{"changed piece", func(s *etcdstore.Store, set string) {
			key := s.Prefix() + "chunks/big/" + set + "/00000000"
			v := []byte(rawGet(t, cli, key))
			v[100] ^= 1
			rawPut(t, cli, key, string(v))
		}, "do not add up", false, "chunks/big/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openAt(t, srv, etcdstore.Options{})
			if err := s.Commit(ctx, "big", 0, large("big", 1)); err != nil {
				t.Fatal(err)
			}
			tc.damage(s, sets(pieces(t, cli, s, "big"))[0])
			_, err := s.Load(ctx, "big")
			if !errors.Is(err, storage.ErrCorrupt) || !strings.Contains(err.Error(), tc.load) || !strings.Contains(err.Error(), s.Prefix()) {
				t.Fatalf("Load: %v, want ErrCorrupt saying %q and where", err, tc.load)
			}
			if !tc.commitToo {
				return
			}
			before := rawRange(t, cli, s.Prefix())
			err = s.Commit(ctx, "big", 1, large("big", 2))
			if !errors.Is(err, storage.ErrCorrupt) {
				t.Fatalf("Commit over it: %v, want ErrCorrupt", err)
			}
			if after := rawRange(t, cli, s.Prefix()); after != before {
				t.Fatalf("a refused commit changed the store:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

// rawRange is every key under prefix with its revisions and value size.
func rawRange(t *testing.T, cli *clientv3.Client, prefix string) string {
	t.Helper()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&b, "%s %d %d %d\n", kv.Key, kv.CreateRevision, kv.ModRevision, len(kv.Value))
	}
	return b.String()
}

// TestChunkedRequestTooLarge: with etcd's request limit below a piece, a
// large commit fails saying which limit to raise, and leaves no piece.
func TestChunkedRequestTooLarge(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.MaxRequestBytes(256<<10))
	cli := rawClient(t, srv)
	s := openAt(t, srv, etcdstore.Options{})
	err := s.Commit(ctx, "big", 0, large("big", 1))
	if err == nil || errors.Is(err, storage.ErrConflict) || !strings.Contains(err.Error(), "--max-request-bytes") {
		t.Fatalf("Commit of a large assignment: %v, want an error naming --max-request-bytes", err)
	}
	if p := pieces(t, cli, s, "big"); len(p) != 0 {
		t.Fatalf("a failed commit left pieces: %v", p)
	}
}

// TestUpgradeFormat2: a writable Open moves a format 2 store to format 3,
// keeping its incarnation and jobs; a read-only one writes nothing.
func TestUpgradeFormat2(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := rawClient(t, srv)
	prefix := fmt.Sprintf("/two-%d/", prefixes.Add(1))
	inc := storage.NewIncarnation()
	a := storagetest.Assignment("old", 3, 2, 2)
	a.Incarnation = inc
	enc, _ := storage.EncodeAssignment(a)
	rawPut(t, cli, prefix+"meta/format_version", string(storage.EncodeFormatVersion(2)))
	rawPut(t, cli, prefix+"meta/incarnation", inc)
	rawPut(t, cli, prefix+"jobs/old/current", string(enc))

	ro := openAt(t, srv, etcdstore.Options{Prefix: prefix, ReadOnly: true})
	if rec := mustLoad(t, ro, "old"); !storagetest.Same(rec.Current, a) || ro.Incarnation() != inc {
		t.Fatalf("read-only store of format 2 loads %v in %q", rec.Current.Version(), ro.Incarnation())
	}
	if got := rawGet(t, cli, prefix+"meta/format_version"); got != string(storage.EncodeFormatVersion(2)) {
		t.Fatalf("read-only open rewrote the format version: %q", got)
	}
	s := openAt(t, srv, etcdstore.Options{Prefix: prefix})
	if got := rawGet(t, cli, prefix+"meta/format_version"); got != string(storage.EncodeFormatVersion(3)) || s.Incarnation() != inc {
		t.Fatalf("after a writable open: format %q, incarnation %q (was %q)", got, s.Incarnation(), inc)
	}
	if err := s.Commit(ctx, "old", 3, large("old", 4)); err != nil {
		t.Fatal(err)
	}
	if rec := mustLoad(t, ro, "old"); !storagetest.Same(rec.Current, large("old", 4)) || !storagetest.Same(rec.Previous, a) {
		t.Fatalf("loaded %v after %v, want 4 after 3", rec.Current.Version(), rec.Previous.Version())
	}
}

// TestLoadCurrentSkipsThePrevious: LoadCurrent reads no piece of the
// previous assignment: with one of them gone, Load reports the job
// corrupt and LoadCurrent still loads the current assignment.
func TestLoadCurrentSkipsThePrevious(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := rawClient(t, srv)
	s := openAt(t, srv, etcdstore.Options{})
	if err := s.Commit(ctx, "big", 0, large("big", 1)); err != nil {
		t.Fatal(err)
	}
	first := sets(pieces(t, cli, s, "big"))[0]
	if err := s.Commit(ctx, "big", 1, large("big", 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, s.Prefix()+"chunks/big/"+first+"/00000000"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "big"); !errors.Is(err, storage.ErrCorrupt) {
		t.Fatalf("Load with a piece of the previous assignment gone: %v, want ErrCorrupt", err)
	}
	rec, err := s.LoadCurrent(ctx, "big")
	if err != nil || !storagetest.Same(rec.Current, large("big", 2)) || rec.Previous != nil {
		t.Fatalf("LoadCurrent: %v, %v; want generation 2 alone", rec.Current.Version(), err)
	}
}
