package etcdstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/etcdstore"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// tlsEtcd is an etcd server that serves TLS with a certificate of
// serverCA and, when clientCA is set, requires client certificates of it.
type tlsEtcd struct {
	srv                *etcdtest.Server
	serverCA, clientCA *etcdtest.CA
	// cert and key are a client certificate of clientCA, CN "slicerd".
	cert, key string
}

func startTLSEtcd(t testing.TB, clientAuth bool) tlsEtcd {
	t.Helper()
	e := tlsEtcd{serverCA: etcdtest.NewCA(t, "etcd-server")}
	scert, skey := e.serverCA.Issue(t, "etcd")
	clientCAFile := ""
	if clientAuth {
		e.clientCA = etcdtest.NewCA(t, "etcd-client")
		clientCAFile = e.clientCA.CertFile
		e.cert, e.key = e.clientCA.Issue(t, "slicerd")
	}
	e.srv = etcdtest.Start(t, etcdtest.TLS(scert, skey, clientCAFile))
	return e
}

// tls is the store's TLS setting that etcd accepts.
func (e tlsEtcd) tls() *etcdstore.TLS {
	return &etcdstore.TLS{CAFile: e.serverCA.CertFile, CertFile: e.cert, KeyFile: e.key}
}

// raw is a plain etcd client over TLS, as etcdctl with --cacert, --cert
// and --key would be.
func (e tlsEtcd) raw(t testing.TB, user, password string) *clientv3.Client {
	t.Helper()
	return e.srv.Client(t, e.serverCA.ClientTLS(t, e.cert, e.key), user, password)
}

// snapshot is every key under prefix with its value and the revision that
// last wrote it: a refused Open must leave it as it was.
func snapshot(t testing.TB, cli *clientv3.Client, prefix string) []byte {
	t.Helper()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	var raw []byte
	for _, kv := range resp.Kvs {
		raw = fmt.Appendf(raw, "%q=%q@%d\n", kv.Key, kv.Value, kv.ModRevision)
	}
	return raw
}

// TestContractOverTLS: the storage contract holds over mutual TLS.
func TestContractOverTLS(t *testing.T) {
	e := startTLSEtcd(t, true)
	cli := e.raw(t, "", "")
	open := func(t *testing.T, prefix string) *etcdstore.Store {
		s, err := etcdstore.Open(ctx, etcdstore.Options{Endpoints: []string{e.srv.Endpoint()}, Prefix: prefix, TLS: e.tls()})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	}
	storagetest.Run(t, storagetest.Opener{
		Open: func(t *testing.T) storage.Store { return open(t, fmt.Sprintf("/tls-%d/", prefixes.Add(1))) },
		Peer: func(t *testing.T, s storage.Store) storage.Store {
			p, err := etcdstore.Open(ctx, etcdstore.Options{
				Endpoints: []string{e.srv.ClientURL()}, Prefix: s.(*etcdstore.Store).Prefix(), TLS: e.tls(),
			})
			if err != nil {
				t.Fatalf("Open peer over %s: %v", e.srv.ClientURL(), err)
			}
			return p
		},
		Raw: func(t *testing.T, s storage.Store) []byte { return snapshot(t, cli, s.(*etcdstore.Store).Prefix()) },
		Reopen: func(t *testing.T, s storage.Store) storage.Store {
			prefix := s.(*etcdstore.Store).Prefix()
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return open(t, prefix)
		},
	})
}

// TestOpenRefusesBadTLS: a wrong CA, a missing client certificate or one
// etcd does not trust fail Open with ErrTLS and what to fix, and leave the
// stored assignment as it was.
func TestOpenRefusesBadTLS(t *testing.T) {
	e := startTLSEtcd(t, true)
	cli := e.raw(t, "", "")
	good := openAt(t, e.srv, etcdstore.Options{TLS: e.tls()})
	if err := good.Commit(ctx, "j", 0, storagetest.Assignment("j", 1, 2, 1)); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, cli, good.Prefix())
	stranger := etcdtest.NewCA(t, "stranger")
	strangerCert, strangerKey := stranger.Issue(t, "slicerd")

	for _, tc := range []struct {
		name string
		tls  *etcdstore.TLS
		want []string
	}{
		{"wrong CA", &etcdstore.TLS{CAFile: stranger.CertFile, CertFile: e.cert, KeyFile: e.key},
			[]string{"no CA in " + stranger.CertFile, "unknown authority", "--etcd-ca"}},
		{"system roots", &etcdstore.TLS{CertFile: e.cert, KeyFile: e.key},
			[]string{"no CA in the system's roots", "--etcd-ca"}},
		{"no client certificate", &etcdstore.TLS{CAFile: e.serverCA.CertFile},
			[]string{"asks for a client certificate", "--etcd-cert and --etcd-key"}},
		{"untrusted client certificate", &etcdstore.TLS{CAFile: e.serverCA.CertFile, CertFile: strangerCert, KeyFile: strangerKey},
			[]string{"refused the client certificate " + strangerCert, "--trusted-ca-file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := etcdstore.Open(ctx, etcdstore.Options{
				Endpoints: []string{e.srv.Endpoint()}, Prefix: good.Prefix(), TLS: tc.tls, DialTimeout: time.Second,
			})
			if err == nil {
				_ = s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, etcdstore.ErrTLS) {
				t.Errorf("Open: %v, want ErrTLS", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open: %v\nwant it to say %q", err, w)
				}
			}
			if after := snapshot(t, cli, good.Prefix()); !bytes.Equal(after, before) {
				t.Errorf("a refused Open changed the store:\nbefore %s\nafter  %s", before, after)
			}
		})
	}

	t.Run("plaintext", func(t *testing.T) {
		s, err := etcdstore.Open(ctx, etcdstore.Options{Endpoints: []string{e.srv.Endpoint()}, Prefix: good.Prefix(), DialTimeout: time.Second})
		if err == nil {
			_ = s.Close()
			t.Fatal("Open without TLS succeeded")
		}
		if !errors.Is(err, storage.ErrUnavailable) || !strings.Contains(err.Error(), "does it need TLS?") {
			t.Errorf("Open without TLS: %v, want ErrUnavailable asking whether etcd needs TLS", err)
		}
	})
	t.Run("TLS to plaintext etcd", func(t *testing.T) {
		plain := etcdtest.Start(t)
		s, err := etcdstore.Open(ctx, etcdstore.Options{Endpoints: []string{plain.Endpoint()}, TLS: e.tls(), DialTimeout: time.Second})
		if err == nil {
			_ = s.Close()
			t.Fatal("Open over TLS of a plaintext etcd succeeded")
		}
		if !errors.Is(err, etcdstore.ErrTLS) || !strings.Contains(err.Error(), "did not complete a TLS handshake") {
			t.Errorf("Open: %v, want ErrTLS saying etcd did not complete a TLS handshake", err)
		}
	})
}

// TestOptionsRefused: half-given credentials and unreadable files are
// refused before any connection, naming the flag to fix.
func TestOptionsRefused(t *testing.T) {
	ca := etcdtest.NewCA(t, "ca")
	cert, key := ca.Issue(t, "slicerd")
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts etcdstore.Options
		is   error
		want string
	}{
		{"password without user", etcdstore.Options{Password: "pw"}, storage.ErrInvalid, "--etcd-username"},
		{"user without password", etcdstore.Options{Username: "u"}, storage.ErrInvalid, "--etcd-password-file"},
		{"cert without key", etcdstore.Options{TLS: &etcdstore.TLS{CertFile: cert}}, storage.ErrInvalid, "--etcd-key"},
		{"key without cert", etcdstore.Options{TLS: &etcdstore.TLS{KeyFile: key}}, storage.ErrInvalid, "--etcd-cert"},
		{"http with TLS", etcdstore.Options{Endpoints: []string{"http://127.0.0.1:1"}, TLS: &etcdstore.TLS{CAFile: ca.CertFile}}, storage.ErrInvalid, "mix http://"},
		{"missing CA", etcdstore.Options{TLS: &etcdstore.TLS{CAFile: garbage + ".missing"}}, etcdstore.ErrTLS, "--etcd-ca"},
		{"garbage CA", etcdstore.Options{TLS: &etcdstore.TLS{CAFile: garbage}}, etcdstore.ErrTLS, "holds no PEM certificate"},
		{"garbage key", etcdstore.Options{TLS: &etcdstore.TLS{CertFile: cert, KeyFile: garbage}}, etcdstore.ErrTLS, "matching PEM key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.opts.Endpoints == nil {
				tc.opts.Endpoints = []string{"127.0.0.1:1"}
			}
			s, err := etcdstore.Open(ctx, tc.opts)
			if err == nil {
				_ = s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open: %v\nwant %v saying %q", err, tc.is, tc.want)
			}
		})
	}
}

// TestCertificateRotation: after etcd's server certificate moves to a new
// CA and the client certificate is reissued, both on disk, an open Store
// reconnects with the new files: no restart.
func TestCertificateRotation(t *testing.T) {
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	serverCA1, clientCA1 := etcdtest.NewCA(t, "server-1"), etcdtest.NewCA(t, "client-1")
	serverCA1.IssueTo(t, "etcd", path("server.pem"), path("server-key.pem"))
	copyFile(t, clientCA1.CertFile, path("server-trusts.pem"))
	srv := etcdtest.Start(t, etcdtest.TLS(path("server.pem"), path("server-key.pem"), path("server-trusts.pem")))

	copyFile(t, serverCA1.CertFile, path("client-trusts.pem"))
	clientCA1.IssueTo(t, "slicerd", path("client.pem"), path("client-key.pem"))
	s := openAt(t, srv, etcdstore.Options{
		TLS:            &etcdstore.TLS{CAFile: path("client-trusts.pem"), CertFile: path("client.pem"), KeyFile: path("client-key.pem")},
		RequestTimeout: 500 * time.Millisecond,
	})
	if err := s.Commit(ctx, "j", 0, storagetest.Assignment("j", 1, 2, 1)); err != nil {
		t.Fatal(err)
	}
	// The certificates before the rotation, kept for the check below.
	oldCert, oldKey := clientCA1.Issue(t, "slicerd")

	// Both sides move to new CAs; etcd restarts on its new files.
	serverCA2, clientCA2 := etcdtest.NewCA(t, "server-2"), etcdtest.NewCA(t, "client-2")
	srv.Stop()
	serverCA2.IssueTo(t, "etcd", path("server.pem"), path("server-key.pem"))
	copyFile(t, clientCA2.CertFile, path("server-trusts.pem"))
	clientCA2.IssueTo(t, "slicerd", path("client.pem"), path("client-key.pem"))
	copyFile(t, serverCA2.CertFile, path("client-trusts.pem"))
	srv.Restart()

	// The old files no longer pass, so a Load that succeeds used the new.
	stale, err := etcdstore.Open(ctx, etcdstore.Options{
		Endpoints: []string{srv.Endpoint()}, Prefix: s.Prefix(), DialTimeout: time.Second,
		TLS: &etcdstore.TLS{CAFile: serverCA1.CertFile, CertFile: oldCert, KeyFile: oldKey},
	})
	if err == nil {
		_ = stale.Close()
		t.Fatal("etcd still accepts the certificates from before the rotation; the test proves nothing")
	}
	testwait.For(t, "the store to reconnect with the rotated certificates", func() bool {
		_, err := s.Load(ctx, "j")
		return err == nil
	})
	if err := s.Commit(ctx, "j", 1, storagetest.Assignment("j", 2, 2, 1)); err != nil {
		t.Fatalf("Commit after the rotation: %v", err)
	}
}

// copyFile replaces dst with src's content in one rename.
func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		t.Fatal(err)
	}
}
