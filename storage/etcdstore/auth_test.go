package etcdstore_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/etcdstore"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// enableAuth turns etcd's authentication on with a root user, a user
// "slicerd" that may read and write under prefix and a user "reader" that
// may only read there.
func enableAuth(t *testing.T, cli *clientv3.Client, prefix string) {
	t.Helper()
	etcdtest.EnableAuth(t, cli,
		etcdtest.User{Name: "slicerd", Password: "s3cret", Prefix: prefix, Write: true},
		etcdtest.User{Name: "reader", Password: "r3ader", Prefix: prefix})
}

// TestPasswordAuth: against an etcd with authentication on (over TLS), the
// store works as a user with a password; a wrong password, no user, and a
// user without write access fail Open with ErrAuth and what to fix, and
// leave the stored assignment as it was.
func TestPasswordAuth(t *testing.T) {
	e := startTLSEtcd(t, false)
	const prefix = "/auth/"
	enableAuth(t, e.raw(t, "", ""), prefix)
	root := e.raw(t, "root", etcdtest.RootPassword)
	open := func(opts etcdstore.Options) (*etcdstore.Store, error) {
		opts.Endpoints, opts.Prefix, opts.TLS = []string{e.srv.Endpoint()}, prefix, e.tls()
		return etcdstore.Open(ctx, opts)
	}

	s, err := open(etcdstore.Options{Username: "slicerd", Password: "s3cret"})
	if err != nil {
		t.Fatalf("Open as slicerd: %v", err)
	}
	defer s.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch := s.Watch(wctx, "j")
	if err := s.Commit(ctx, "j", 0, storagetest.Assignment("j", 1, 2, 1)); err != nil {
		t.Fatalf("Commit as slicerd: %v", err)
	}
	select {
	case job := <-watch:
		if job != "j" {
			t.Fatalf("watch delivered %q, want j", job)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no watch notification for the commit")
	}
	if rec, err := s.Load(ctx, "j"); err != nil || rec.Generation() != 1 {
		t.Fatalf("Load as slicerd: generation %d, %v", rec.Generation(), err)
	}
	before := snapshot(t, root, prefix)

	for _, tc := range []struct {
		name string
		opts etcdstore.Options
		want []string
	}{
		{"wrong password", etcdstore.Options{Username: "slicerd", Password: "guess"},
			[]string{`refused user "slicerd"`, "--etcd-username", "--etcd-password-file"}},
		{"no user", etcdstore.Options{},
			[]string{"authentication on and was given no user", "--etcd-username"}},
		{"reader writing", etcdstore.Options{Username: "reader", Password: "r3ader"},
			[]string{`denied user "reader" access under /auth/`, "--prefix=true readwrite /auth/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := open(tc.opts)
			if err == nil {
				_ = s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, etcdstore.ErrAuth) {
				t.Errorf("Open: %v, want ErrAuth", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open: %v\nwant it to say %q", err, w)
				}
			}
			if after := snapshot(t, root, prefix); !bytes.Equal(after, before) {
				t.Errorf("a refused Open changed the store:\nbefore %s\nafter  %s", before, after)
			}
		})
	}

	// Permissions taken away while the store is open fail its calls as
	// unavailable, and giving them back needs no reopening.
	if _, err := root.RoleRevokePermission(ctx, "slicerd", prefix, clientv3.GetPrefixRangeEnd(prefix)); err != nil {
		t.Fatal(err)
	}
	err = s.Commit(ctx, "j", 1, storagetest.Assignment("j", 2, 2, 1))
	if !errors.Is(err, etcdstore.ErrAuth) || !errors.Is(err, storage.ErrUnavailable) || !strings.Contains(err.Error(), "grant-permission") {
		t.Errorf("Commit without permission: %v, want ErrAuth and ErrUnavailable saying how to grant it", err)
	}
	if after := snapshot(t, root, prefix); !bytes.Equal(after, before) {
		t.Errorf("a refused Commit changed the store:\nbefore %s\nafter  %s", before, after)
	}
	if _, err := root.RoleGrantPermission(ctx, "slicerd", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, "j", 1, storagetest.Assignment("j", 2, 2, 1)); err != nil {
		t.Fatalf("Commit once the permission is back: %v", err)
	}

	// A read-only store (a Backup) needs only read access.
	r, err := open(etcdstore.Options{Username: "reader", Password: "r3ader", ReadOnly: true})
	if err != nil {
		t.Fatalf("Open read-only as reader: %v", err)
	}
	defer r.Close()
	if rec, err := r.Load(ctx, "j"); err != nil || rec.Generation() != 2 {
		t.Errorf("Load as reader: generation %d, %v; want 2", rec.Generation(), err)
	}
	if err := r.Commit(ctx, "j", 2, storagetest.Assignment("j", 3, 2, 1)); !errors.Is(err, storage.ErrReadOnly) {
		t.Errorf("Commit on the read-only store: %v, want ErrReadOnly", err)
	}
}

// TestCertificateUser: with etcd's authentication and client certificates
// both on, the certificate's common name is the etcd user, so the store
// needs no password; a certificate naming no permitted user is refused at
// Open with ErrAuth.
func TestCertificateUser(t *testing.T) {
	e := startTLSEtcd(t, true)
	const prefix = "/auth/"
	enableAuth(t, e.raw(t, "", ""), prefix)

	s := openAt(t, e.srv, etcdstore.Options{Prefix: prefix, TLS: e.tls()})
	if err := s.Commit(ctx, "j", 0, storagetest.Assignment("j", 1, 2, 1)); err != nil {
		t.Fatalf("Commit as the certificate's user: %v", err)
	}

	cert, key := e.clientCA.Issue(t, "nobody")
	_, err := etcdstore.Open(ctx, etcdstore.Options{
		Endpoints: []string{e.srv.Endpoint()}, Prefix: prefix,
		TLS: &etcdstore.TLS{CAFile: e.serverCA.CertFile, CertFile: cert, KeyFile: key},
	})
	if !errors.Is(err, etcdstore.ErrAuth) || !strings.Contains(err.Error(), `user "nobody" (the common name of `+cert) {
		t.Errorf("Open with a certificate of no etcd user: %v, want ErrAuth naming the certificate", err)
	}
}
