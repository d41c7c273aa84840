package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/etcdstore"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
	"github.com/slicerd/slicerd/storage/storagetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

var prefixes atomic.Int64

// openAt opens a store under a prefix no other test uses.
func openAt(t testing.TB, srv *etcdtest.Server, opts etcdstore.Options) *etcdstore.Store {
	t.Helper()
	opts.Endpoints = []string{srv.Endpoint()}
	if opts.Prefix == "" {
		opts.Prefix = fmt.Sprintf("/test-%d/", prefixes.Add(1))
	}
	s, err := etcdstore.Open(ctx, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// rawClient is a plain etcd client, to write what slicerd never would.
func rawClient(t testing.TB, srv *etcdtest.Server) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func rawGet(t testing.TB, cli *clientv3.Client, key string) string {
	t.Helper()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "<absent>"
	}
	return string(resp.Kvs[0].Value)
}

func rawPut(t testing.TB, cli *clientv3.Client, key, value string) {
	t.Helper()
	if _, err := cli.Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
}

func TestContract(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := rawClient(t, srv)
	storagetest.Run(t, storagetest.Opener{
		Open: func(t *testing.T) storage.Store {
			s, err := etcdstore.Open(ctx, etcdstore.Options{
				Endpoints: []string{srv.Endpoint()},
				Prefix:    fmt.Sprintf("/contract-%d/", prefixes.Add(1)),
			})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return s
		},
		// A second client, as a second slicerd process would have.
		Peer: func(t *testing.T, s storage.Store) storage.Store {
			p, err := etcdstore.Open(ctx, etcdstore.Options{
				Endpoints: []string{srv.ClientURL()},
				Prefix:    s.(*etcdstore.Store).Prefix(),
			})
			if err != nil {
				t.Fatalf("Open peer: %v", err)
			}
			return p
		},
		// Every key under the store's prefix with its value and the
		// revision that last wrote it: a failed write puts nothing, not
		// even the same value again.
		Raw: func(t *testing.T, s storage.Store) []byte {
			resp, err := cli.Get(ctx, s.(*etcdstore.Store).Prefix(), clientv3.WithPrefix())
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			var raw []byte
			for _, kv := range resp.Kvs {
				raw = fmt.Appendf(raw, "%q=%q@%d\n", kv.Key, kv.Value, kv.ModRevision)
			}
			return raw
		},
		Reopen: func(t *testing.T, s storage.Store) storage.Store {
			prefix := s.(*etcdstore.Store).Prefix()
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			r, err := etcdstore.Open(ctx, etcdstore.Options{Endpoints: []string{srv.Endpoint()}, Prefix: prefix})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return r
		},
	})
}

func TestLayout(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := rawClient(t, srv)
	s := openAt(t, srv, etcdstore.Options{Prefix: "/lay"})
	if s.Prefix() != "/lay/" {
		t.Fatalf("Prefix() = %q, want /lay/", s.Prefix())
	}
	a1, a2 := storagetest.Assignment("j", 1, 2, 1), storagetest.Assignment("j", 2, 3, 1)
	if err := s.Commit(ctx, "j", 0, a1); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, "j", 1, a2); err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(ctx, "j", assign.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	enc1, _ := storage.EncodeAssignment(a1)
	enc2, _ := storage.EncodeAssignment(a2)
	cfg, _ := storage.EncodeConfig(assign.DefaultConfig())
	for key, want := range map[string]string{
		"/lay/meta/format_version": string(storage.EncodeFormatVersion(etcdstore.FormatVersion)),
		"/lay/meta/incarnation":    s.Incarnation(),
		"/lay/jobs/j/current":      string(enc2),
		"/lay/jobs/j/previous":     string(enc1),
		"/lay/jobs/j/config":       string(cfg),
	} {
		if got := rawGet(t, cli, key); got != want {
			t.Errorf("key %s holds %q, want %q", key, got, want)
		}
	}
}

func TestPrefixesAreSeparate(t *testing.T) {
	srv := etcdtest.Start(t)
	a := openAt(t, srv, etcdstore.Options{Prefix: "/a"})
	ab := openAt(t, srv, etcdstore.Options{Prefix: "/a/b"})
	if err := a.SetConfig(ctx, "x", assign.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if err := ab.SetConfig(ctx, "y", assign.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		s    *etcdstore.Store
		want string
	}{{a, "x"}, {ab, "y"}} {
		jobs, err := tc.s.Jobs(ctx)
		if err != nil || len(jobs) != 1 || jobs[0] != tc.want {
			t.Errorf("Jobs under %s = %q, %v; want [%s]", tc.s.Prefix(), jobs, err, tc.want)
		}
	}
}

// TestCorrupt: values slicerd cannot read are reported as ErrCorrupt and
// never overwritten by Commit; SetConfig repairs a config.
func TestCorrupt(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := rawClient(t, srv)
	good, _ := storage.EncodeAssignment(storagetest.Assignment("j", 1, 1, 1))
	other, _ := storage.EncodeAssignment(storagetest.Assignment("other", 1, 1, 1))
	newer, _ := storage.EncodeAssignment(storagetest.Assignment("j", 5, 1, 1))
	config, _ := storage.EncodeConfig(assign.DefaultConfig())
	for _, tc := range []struct {
		name string
		kv   map[string]string
		want string
	}{
		{"current garbage", map[string]string{"current": "garbage"}, "current assignment does not decode"},
		{"current of another job", map[string]string{"current": string(other)}, `belongs to job "other"`},
		{"previous garbage", map[string]string{"current": string(good), "previous": "garbage"}, "previous assignment does not decode"},
		{"previous not older", map[string]string{"current": string(good), "previous": string(newer)}, "not below"},
		{"orphan previous", map[string]string{"previous": string(good)}, "without a current one"},
		{"config garbage", map[string]string{"current": string(good), "config": "{"}, "config does not decode"},
		{"config invalid", map[string]string{"config": `{"MinRedundancy":0,"MaxRedundancy":0}`}, "config is invalid"},
		// etcd gives a present 0-byte value back as nil: still a value, a
		// corrupt one, never a job without an assignment or not found.
		{"current empty", map[string]string{"current": ""}, "current assignment does not decode"},
		{"current empty with a config", map[string]string{"current": "", "config": string(config)}, "current assignment does not decode"},
		{"previous empty", map[string]string{"current": string(good), "previous": ""}, "previous assignment does not decode"},
		{"config empty", map[string]string{"current": string(good), "config": ""}, "config does not decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openAt(t, srv, etcdstore.Options{})
			for leaf, v := range tc.kv {
				rawPut(t, cli, s.Prefix()+"jobs/j/"+leaf, v)
			}
			_, err := s.Load(ctx, "j")
			if !errors.Is(err, storage.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), s.Prefix()+"jobs/j/") {
				t.Fatalf("Load: %v, want ErrCorrupt with %q and the key", err, tc.want)
			}
			for _, prev := range []uint64{0, 1, 5} {
				err := s.Commit(ctx, "j", prev, storagetest.Assignment("j", 6, 2, 1))
				if !errors.Is(err, storage.ErrCorrupt) || errors.Is(err, storage.ErrConflict) || errors.Is(err, storage.ErrNotFound) {
					t.Fatalf("Commit over corrupt data (prevGen %d): %v, want ErrCorrupt", prev, err)
				}
			}
			for leaf, v := range tc.kv {
				if got := rawGet(t, cli, s.Prefix()+"jobs/j/"+leaf); got != v {
					t.Fatalf("key %s was overwritten: %q", leaf, got)
				}
			}
			if _, ok := tc.kv["current"]; !ok && rawGet(t, cli, s.Prefix()+"jobs/j/current") != "<absent>" {
				t.Fatal("Commit wrote a current over corrupt data")
			}
			if jobs, err := s.Jobs(ctx); err != nil || len(jobs) != 1 {
				t.Fatalf("Jobs: %q, %v", jobs, err)
			}
		})
	}
	t.Run("config repaired by SetConfig", func(t *testing.T) {
		s := openAt(t, srv, etcdstore.Options{})
		rawPut(t, cli, s.Prefix()+"jobs/j/config", "{")
		if err := s.SetConfig(ctx, "j", assign.DefaultConfig()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Load(ctx, "j"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("key naming no job", func(t *testing.T) {
		s := openAt(t, srv, etcdstore.Options{})
		rawPut(t, cli, s.Prefix()+"jobs/Not A Job/current", "x")
		if _, err := s.Jobs(ctx); !errors.Is(err, storage.ErrCorrupt) {
			t.Fatalf("Jobs: %v, want ErrCorrupt", err)
		}
	})
	t.Run("format version", func(t *testing.T) {
		for _, tc := range []struct {
			value string
			want  error
		}{
			{"short", storage.ErrCorrupt},
			{string(storage.EncodeFormatVersion(0)), storage.ErrCorrupt},
			{string(storage.EncodeFormatVersion(etcdstore.FormatVersion + 1)), storage.ErrNewerFormat},
		} {
			prefix := fmt.Sprintf("/meta-%d/", prefixes.Add(1))
			rawPut(t, cli, prefix+"meta/format_version", tc.value)
			for _, ro := range []bool{false, true} {
				_, err := etcdstore.Open(ctx, etcdstore.Options{Endpoints: []string{srv.Endpoint()}, Prefix: prefix, ReadOnly: ro})
				if !errors.Is(err, tc.want) {
					t.Errorf("Open with format version %q (read-only %v): %v, want %v", tc.value, ro, err, tc.want)
				}
			}
			if got := rawGet(t, cli, prefix+"meta/format_version"); got != tc.value {
				t.Errorf("Open rewrote the format version: %q", got)
			}
		}
	})
}

// TestReadOnly: a read-only store serves an empty prefix, refuses every
// write and writes nothing itself.
func TestReadOnly(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := rawClient(t, srv)
	ro := openAt(t, srv, etcdstore.Options{Prefix: "/ro", ReadOnly: true})
	if jobs, err := ro.Jobs(ctx); err != nil || len(jobs) != 0 {
		t.Fatalf("Jobs of an empty read-only store: %q, %v", jobs, err)
	}
	if _, err := ro.Load(ctx, "j"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Load: %v, want ErrNotFound", err)
	}
	if err := ro.Commit(ctx, "j", 0, storagetest.Assignment("j", 1, 1, 1)); !errors.Is(err, storage.ErrReadOnly) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("Commit: %v, want ErrReadOnly", err)
	}
	if err := ro.SetConfig(ctx, "j", assign.DefaultConfig()); !errors.Is(err, storage.ErrReadOnly) {
		t.Fatalf("SetConfig: %v, want ErrReadOnly", err)
	}
	resp, err := cli.Get(ctx, "/ro/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("a read-only store wrote %d keys (%v)", resp.Count, err)
	}
	// It sees what a writer commits.
	rw := openAt(t, srv, etcdstore.Options{Prefix: "/ro"})
	a := storagetest.Assignment("j", 1, 1, 1)
	if err := rw.Commit(ctx, "j", 0, a); err != nil {
		t.Fatal(err)
	}
	if rec, err := ro.Load(ctx, "j"); err != nil || !storagetest.Same(rec.Current, a) {
		t.Fatalf("read-only Load after a commit: %+v, %v", rec, err)
	}
}

func TestOpenInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts etcdstore.Options
		want string
	}{
		{"no endpoints", etcdstore.Options{}, "no etcd endpoints"},
		{"empty endpoint", etcdstore.Options{Endpoints: []string{"127.0.0.1:2379", " "}}, "empty etcd endpoint"},
		{"bad prefix", etcdstore.Options{Endpoints: []string{"127.0.0.1:2379"}, Prefix: "a\nb"}, "prefix"},
	} {
		_, err := etcdstore.Open(ctx, tc.opts)
		if !errors.Is(err, storage.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open: %v, want ErrInvalid with %q", tc.name, err, tc.want)
		}
	}
}

// TestUnreachable: Open fails within the dial timeout, naming the
// endpoints and what to check.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = etcdstore.Open(ctx, etcdstore.Options{Endpoints: []string{addr}, DialTimeout: 200 * time.Millisecond})
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Open: %v, want ErrUnavailable", err)
	}
	for _, want := range []string{"cannot reach etcd at " + addr, "within 200ms", "check --store", "etcd is running"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open error %q does not say %q", err, want)
		}
	}
}

// TestEtcdDownMidRun: calls fail with ErrUnavailable (never ErrConflict)
// while etcd is down, and the same store recovers once etcd is back on
// the same data; a watch resumes too.
func TestEtcdDownMidRun(t *testing.T) {
	srv := etcdtest.Start(t)
	s := openAt(t, srv, etcdstore.Options{RequestTimeout: 300 * time.Millisecond})
	a1 := storagetest.Assignment("j", 1, 2, 1)
	if err := s.Commit(ctx, "j", 0, a1); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch := s.Watch(wctx, "j")

	srv.Stop()
	err := s.Commit(ctx, "j", 1, storagetest.Assignment("j", 2, 2, 1))
	if !errors.Is(err, storage.ErrUnavailable) || errors.Is(err, storage.ErrConflict) || !strings.Contains(err.Error(), srv.Endpoint()) {
		t.Fatalf("Commit while etcd is down: %v, want ErrUnavailable naming the endpoint", err)
	}
	if _, err := s.Load(ctx, "j"); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Load while etcd is down: %v, want ErrUnavailable", err)
	}
	if _, err := s.Jobs(ctx); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Jobs while etcd is down: %v, want ErrUnavailable", err)
	}

	// A watch started while etcd is down cannot know where to start: once
	// etcd is back it delivers every job it watches.
	late := s.Watch(wctx, "")

	srv.Restart()
	var rec storage.Record
	testwait.For(t, "the store to answer after etcd restarted", func() bool {
		rec, err = s.Load(ctx, "j")
		return err == nil
	})
	if !storagetest.Same(rec.Current, a1) {
		t.Fatalf("after restart: current %+v, want generation 1 as committed", rec.Current)
	}
	a2 := storagetest.Assignment("j", 2, 3, 1)
	testwait.For(t, "a commit after etcd restarted", func() bool {
		err = s.Commit(ctx, "j", 1, a2)
		if errors.Is(err, storage.ErrConflict) {
			t.Fatalf("Commit after restart: %v", err)
		}
		return err == nil
	})
	select {
	case name := <-watch:
		if name != "j" {
			t.Fatalf("watch delivered %q, want j", name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watch delivered nothing after etcd came back")
	}
	select {
	case name := <-late:
		if name != "j" {
			t.Fatalf("watch started while etcd was down delivered %q, want j", name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watch started while etcd was down delivered nothing after it came back")
	}
	if rec := mustLoad(t, s, "j"); !storagetest.Same(rec.Current, a2) || !storagetest.Same(rec.Previous, a1) {
		t.Fatalf("final record: %+v", rec)
	}
}

// A watch that must resync (one started while etcd is down cannot know
// where to start) delivers the jobs deleted before it, not only the
// stored ones: a receiver still serving one deleted meanwhile must read
// it gone. A watch of one deleted job delivers it.
func TestWatchResyncDeliversDeletedJobs(t *testing.T) {
	srv := etcdtest.Start(t)
	s := openAt(t, srv, etcdstore.Options{RequestTimeout: 300 * time.Millisecond})
	for _, job := range []string{"kept", "gone"} {
		if err := s.Commit(ctx, job, 0, storagetest.Assignment(job, 1, 2, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv.Stop()
	all, one := s.Watch(wctx, ""), s.Watch(wctx, "gone")
	srv.Restart()

	seen := map[string]bool{}
	for !seen["kept"] || !seen["gone"] {
		select {
		case name := <-all:
			seen[name] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("the resynced watch of every job delivered %v, want kept and gone", seen)
		}
	}
	select {
	case name := <-one:
		if name != "gone" {
			t.Fatalf("the resynced watch of gone delivered %q", name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the resynced watch of the deleted job delivered nothing")
	}
}

// TestRequestTooLarge: an assignment above etcd's request limit fails with
// an error saying which limit to raise, not a conflict.
func TestRequestTooLarge(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.MaxRequestBytes(16<<10))
	s := openAt(t, srv, etcdstore.Options{})
	err := s.Commit(ctx, "big", 0, storagetest.Assignment("big", 1, 100, 100))
	if err == nil || errors.Is(err, storage.ErrConflict) || !strings.Contains(err.Error(), "--max-request-bytes") {
		t.Fatalf("Commit of a large assignment: %v, want an error naming --max-request-bytes", err)
	}
	t.Logf("Commit of a large assignment: %v", err)
}

func mustLoad(t *testing.T, s storage.Store, job string) storage.Record {
	t.Helper()
	rec, err := s.Load(ctx, job)
	if err != nil {
		t.Fatalf("Load(%q): %v", job, err)
	}
	return rec
}

// TestOutOfSpace: an etcd past its quota refuses writes; Commit says so and
// what to do, not a conflict, and reads still work.
func TestOutOfSpace(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.QuotaBackendBytes(4<<20))
	s := openAt(t, srv, etcdstore.Options{})
	a := storagetest.Assignment("big", 1, 100, 100)
	var err error
	for gen := uint64(1); gen < 1000 && err == nil; gen++ {
		a.Generation = gen
		err = s.Commit(ctx, "big", gen-1, a)
	}
	if err == nil || errors.Is(err, storage.ErrConflict) || !strings.Contains(err.Error(), "out of space") {
		t.Fatalf("Commit past the quota: %v, want an out of space error", err)
	}
	t.Logf("Commit past the quota: %v", err)
	if _, err := s.Load(ctx, "big"); err != nil {
		t.Fatalf("Load past the quota: %v", err)
	}
}

// TestUpgradeFormat1 opens a prefix an older slicerd wrote: format 1, no
// incarnation, assignments in codec version 1. A read-only store reads it
// as it is; a writable one gives it an incarnation once, which the old
// assignments then carry.
func TestUpgradeFormat1(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := rawClient(t, srv)
	prefix := fmt.Sprintf("/old-%d/", prefixes.Add(1))
	prev, cur := storagetest.Assignment("old", 4, 2, 2), storagetest.Assignment("old", 5, 3, 2)
	rawPut(t, cli, prefix+"meta/format_version", string(storage.EncodeFormatVersion(1)))
	rawPut(t, cli, prefix+"jobs/old/previous", string(storagetest.EncodeV1(t, prev)))
	rawPut(t, cli, prefix+"jobs/old/current", string(storagetest.EncodeV1(t, cur)))

	ro := openAt(t, srv, etcdstore.Options{Prefix: prefix, ReadOnly: true})
	if ro.Incarnation() != "" {
		t.Fatalf("read-only store of format 1 has incarnation %q", ro.Incarnation())
	}
	if rec := mustLoad(t, ro, "old"); rec.Current.Generation != 5 || rec.Current.Incarnation != "" {
		t.Fatalf("read-only store of format 1 loads generation %d of %q, want 5 of none", rec.Current.Generation, rec.Current.Incarnation)
	}
	if got := rawGet(t, cli, prefix+"meta/format_version"); got != string(storage.EncodeFormatVersion(1)) {
		t.Fatalf("read-only open rewrote the format version: %q", got)
	}

	// The first writer upgrades it; the next sees the same incarnation.
	s1 := openAt(t, srv, etcdstore.Options{Prefix: prefix})
	s2 := openAt(t, srv, etcdstore.Options{Prefix: prefix})
	inc := s1.Incarnation()
	if err := assign.ValidateIncarnation(inc); err != nil || s2.Incarnation() != inc {
		t.Fatalf("upgraded store's incarnations %q and %q (%v), want one valid one", inc, s2.Incarnation(), err)
	}
	if got := rawGet(t, cli, prefix+"meta/incarnation"); got != inc {
		t.Fatalf("stored incarnation %q, want %q", got, inc)
	}
	if got := rawGet(t, cli, prefix+"meta/format_version"); got != string(storage.EncodeFormatVersion(etcdstore.FormatVersion)) {
		t.Fatalf("format version after the upgrade: %q", got)
	}
	rec := mustLoad(t, s2, "old")
	if !storagetest.Same(rec.Current, cur) || !storagetest.Same(rec.Previous, prev) ||
		rec.Current.Incarnation != inc || rec.Previous.Incarnation != inc {
		t.Fatalf("upgraded store loads generation %d of %q after %d of %q, want 5 after 4, of %q",
			rec.Current.Generation, rec.Current.Incarnation, rec.Previous.Generation, rec.Previous.Incarnation, inc)
	}
}

// TestBadIncarnation: a format 2 prefix whose incarnation is missing or
// malformed is corrupt, and left untouched.
func TestBadIncarnation(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := rawClient(t, srv)
	for name, v := range map[string]string{"missing": "", "not an id": "a b"} {
		t.Run(name, func(t *testing.T) {
			prefix := fmt.Sprintf("/badinc-%d/", prefixes.Add(1))
			rawPut(t, cli, prefix+"meta/format_version", string(storage.EncodeFormatVersion(etcdstore.FormatVersion)))
			if v != "" {
				rawPut(t, cli, prefix+"meta/incarnation", v)
			}
			for _, ro := range []bool{false, true} {
				_, err := etcdstore.Open(ctx, etcdstore.Options{Endpoints: []string{srv.Endpoint()}, Prefix: prefix, ReadOnly: ro})
				if !errors.Is(err, storage.ErrCorrupt) {
					t.Errorf("Open (read-only %v): %v, want ErrCorrupt", ro, err)
				}
			}
			want := v
			if v == "" {
				want = "<absent>"
			}
			if got := rawGet(t, cli, prefix+"meta/incarnation"); got != want {
				t.Errorf("Open rewrote the incarnation: %q", got)
			}
		})
	}
}

// An unreadable generation a deleted job was recorded with stops the Commit
// that would create the job again; deleting the job again replaces it.
func TestUndecodableDeletedGeneration(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := rawClient(t, srv)
	s := openAt(t, srv, etcdstore.Options{})
	if err := s.Commit(ctx, "j", 0, storagetest.Assignment("j", 2, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	key := s.Prefix() + "deleted/j"
	if got := rawGet(t, cli, key); got != string(storage.EncodeGeneration(2)) {
		t.Fatalf("%s holds %q after deleting the job at generation 2", key, got)
	}
	rawPut(t, cli, key, "seven")
	err := s.Commit(ctx, "j", 0, storagetest.Assignment("j", 1, 1, 1))
	if !errors.Is(err, storage.ErrCorrupt) || !strings.Contains(err.Error(), key) {
		t.Fatalf("Commit creating a job whose deleted generation is unreadable: %v, want ErrCorrupt naming %s", err, key)
	}
	if got := rawGet(t, cli, s.Prefix()+"jobs/j/current"); got != "<absent>" {
		t.Fatalf("the refused Commit stored %q", got)
	}
	if err := s.SetConfig(ctx, "j", assign.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "j"); err != nil {
		t.Fatalf("Delete over an unreadable deleted generation: %v", err)
	}
	a := storagetest.Assignment("j", 1, 1, 1)
	if err := s.Commit(ctx, "j", 0, a); err != nil || a.Generation != 1 {
		t.Fatalf("after the repair: Commit %v, generation %d; want the job created at generation 1", err, a.Generation)
	}
}
