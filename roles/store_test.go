package roles

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/etcdstore"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
	"github.com/slicerd/slicerd/storage/storagetest"
)

func TestParseStore(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want StoreSpec
	}{
		{"", StoreSpec{}},
		{"bolt", StoreSpec{}},
		{"etcd://127.0.0.1:2379", StoreSpec{Etcd: true, Endpoints: []string{"127.0.0.1:2379"}}},
		{"etcd://a:2379,b:2380/", StoreSpec{Etcd: true, Endpoints: []string{"a:2379", "b:2380"}}},
		{"etcd://a:2379,[::1]:2379/slicerd/prod", StoreSpec{Etcd: true, Endpoints: []string{"a:2379", "[::1]:2379"}, Prefix: "/slicerd/prod"}},
	} {
		got, err := ParseStore(tc.spec)
		if err != nil || got.Etcd != tc.want.Etcd || !slices.Equal(got.Endpoints, tc.want.Endpoints) || got.Prefix != tc.want.Prefix {
			t.Errorf("ParseStore(%q) = %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ spec, want string }{
		{"etc://a:2379", `scheme "etc"`},
		{"file:///tmp/x", `scheme "file"`},
		{"etcd", "neither bolt nor an etcd:// address"},
		{"etcd://", "names no etcd host"},
		{"etcd:///prefix", "names no etcd host"},
		{"etcd://a:2379,,b:2379", "empty etcd host"},
		{"etcd://a", `"a" in store "etcd://a" is not host:port`},
		{"etcd://:2379", "is not host:port"},
		{"etcd://a:0", "invalid port"},
		{"etcd://a:65536", "invalid port"},
		{"etcd://a:port", "invalid port"},
		{"etcd://a:2379/pre fix", "prefix with spaces"},
	} {
		_, err := ParseStore(tc.spec)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseStore(%q) = %v, want ErrConfig with %q", tc.spec, err, tc.want)
		}
	}
}

func TestValidateStore(t *testing.T) {
	cfg := testConfig(t, "n", "")
	cfg.Store = "etcd://127.0.0.1:2379"
	if err := cfg.Validate(); err != nil {
		t.Errorf("an etcd store needs no data dir: %v", err)
	}
	cfg.Store = "bolt"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("bolt store without a data dir: %v", err)
	}
	cfg.Store = "etcd://a:99999"
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("bad store: %v, want ErrConfig", err)
	}
}

// TestAgentsShareEtcdStore: an Assigner and a Backup on another node share
// one etcd store; the backup opens it read-only and streams each commit.
func TestAgentsShareEtcdStore(t *testing.T) {
	srv := etcdtest.Start(t)
	spec := "etcd://" + srv.Endpoint() + "/roles-test"

	acfg := testConfig(t, "assigner-1", "", gossip.RoleAssigner)
	acfg.Store = spec
	assigner := startAgent(t, acfg)
	bcfg := testConfig(t, "backup-1", "", gossip.RoleBackup)
	bcfg.Store = spec
	bcfg.BackupPollInterval = 1 << 40 // only the watch can deliver
	backup := startAgent(t, bcfg)

	if _, ok := backup.store.(*etcdstore.Store); !ok {
		t.Fatalf("backup store is %T, want *etcdstore.Store", backup.store)
	}
	err := backup.store.Commit(context.Background(), "kv", 0, storagetest.Assignment("kv", 1, 1, 1))
	if !errors.Is(err, storage.ErrReadOnly) {
		t.Fatalf("the backup-only agent's store accepted a commit: %v", err)
	}

	taskMember(t, "kv", "t0", assigner.GossipAddr())
	// The job is not stored until the assigner commits its first
	// assignment; the backup then streams it.
	bcli := slicerv1connect.NewBackupServiceClient(api.NewH2CClient(), api.RPCURL(backup.RPCAddr()))
	testwait.For(t, "the first commit", func() bool {
		_, err := bcli.GetAssignment(context.Background(), connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "kv"}))
		return err == nil
	})
	bk := watchJob(t, backup.RPCAddr(), "kv", true)
	bk.until(t, "backup serving t0", hasTasks("t0"))
	taskMember(t, "kv", "t1", assigner.GossipAddr())
	bk.until(t, "backup following the commit of t1", hasTasks("t0", "t1"))
}

// TestBackupEmptyStore: a Backup on a store with no jobs answers NotFound
// "no stored assignment yet" for every job.
func TestBackupEmptyStore(t *testing.T) {
	srv := etcdtest.Start(t)
	cfg := testConfig(t, "backup-1", "", gossip.RoleBackup)
	cfg.Store = "etcd://" + srv.Endpoint() + "/empty"
	backup := startAgent(t, cfg)
	client := slicerv1connect.NewBackupServiceClient(api.NewH2CClient(), api.RPCURL(backup.RPCAddr()))
	_, err := client.GetAssignment(context.Background(), connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "kv"}))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "no stored assignment yet") {
		t.Fatalf("GetAssignment on an empty store: %v, want NotFound saying no stored assignment yet", err)
	}
	stream, err := client.WatchAssignment(context.Background(), connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if stream.Receive() || connect.CodeOf(stream.Err()) != connect.CodeNotFound {
		t.Fatalf("WatchAssignment on an empty store: %v, want NotFound", stream.Err())
	}
}

// FuzzParseStore: any spec parses or is refused with ErrConfig, and a
// parsed etcd spec names only valid host:port endpoints and survives being
// written back and parsed again.
func FuzzParseStore(f *testing.F) {
	for _, s := range []string{"", "bolt", "etcd://127.0.0.1:2379", "etcd://a:1,b:2/p/q", "etcd://[::1]:2379/", "etcd://", "x://y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		got, err := ParseStore(spec)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("ParseStore(%q) error %v is not ErrConfig", spec, err)
			}
			return
		}
		if !got.Etcd {
			if got.Endpoints != nil || got.Prefix != "" {
				t.Fatalf("ParseStore(%q) = %+v: a bolt spec with etcd fields", spec, got)
			}
			return
		}
		if len(got.Endpoints) == 0 {
			t.Fatalf("ParseStore(%q) = %+v: no endpoints", spec, got)
		}
		again, err := ParseStore("etcd://" + strings.Join(got.Endpoints, ",") + got.Prefix)
		if err != nil || !slices.Equal(again.Endpoints, got.Endpoints) || again.Prefix != got.Prefix {
			t.Fatalf("ParseStore(%q) = %+v, but its rewrite parses as %+v, %v", spec, got, again, err)
		}
	})
}

// TestBackupEtcdDown: while its etcd store does not answer, a Backup
// answers UNAVAILABLE, so clients try elsewhere; it serves again once etcd
// is back.
func TestBackupEtcdDown(t *testing.T) {
	srv := etcdtest.Start(t)
	open := func(readOnly bool) (storage.Store, error) {
		return etcdstore.Open(context.Background(), etcdstore.Options{
			Endpoints: []string{srv.Endpoint()}, Prefix: "/down", ReadOnly: readOnly,
			RequestTimeout: 300 * time.Millisecond,
		})
	}
	writer, err := open(false)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	if err := writer.Commit(context.Background(), "kv", 0, storagetest.Assignment("kv", 1, 2, 1)); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "backup-1", "", gossip.RoleBackup)
	cfg.OpenStore = open
	backup := startAgent(t, cfg)
	client := slicerv1connect.NewBackupServiceClient(api.NewH2CClient(), api.RPCURL(backup.RPCAddr()))
	get := func() error {
		_, err := client.GetAssignment(context.Background(), connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "kv"}))
		return err
	}
	if err := get(); err != nil {
		t.Fatalf("GetAssignment: %v", err)
	}
	srv.Stop()
	if err := get(); connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "store unavailable") {
		t.Fatalf("GetAssignment while etcd is down: %v, want UNAVAILABLE", err)
	}
	srv.Restart()
	testwait.For(t, "the backup to serve again", func() bool { return get() == nil })
}
