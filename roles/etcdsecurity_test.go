package roles

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/storage/etcdstore"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

func TestParseStoreTLS(t *testing.T) {
	got, err := ParseStore("etcds://a:2379,b:2379/slicerd/prod")
	if err != nil || !got.Etcd || !got.TLS || len(got.Endpoints) != 2 || got.Prefix != "/slicerd/prod" {
		t.Errorf("ParseStore(etcds://...) = %+v, %v; want TLS to a and b under /slicerd/prod", got, err)
	}
	if got, err := ParseStore("etcd://a:2379"); err != nil || got.TLS {
		t.Errorf("ParseStore(etcd://a:2379) = %+v, %v; want no TLS", got, err)
	}
	if _, err := ParseStore("etcds://"); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "names no etcd host") {
		t.Errorf("ParseStore(etcds://) = %v, want ErrConfig naming no host", err)
	}
}

func TestValidateEtcdSecurity(t *testing.T) {
	for _, tc := range []struct {
		store string
		etcd  EtcdSecurity
		want  string
	}{
		{"bolt", EtcdSecurity{CAFile: "ca.pem"}, "--etcd-ca is set but the store is not etcd"},
		{"bolt", EtcdSecurity{Username: "u", PasswordFile: "pw"}, "--etcd-username is set but the store is not etcd"},
		{"etcd://a:2379", EtcdSecurity{CertFile: "c.pem"}, "--etcd-cert c.pem has no key; give its key file in --etcd-key"},
		{"etcd://a:2379", EtcdSecurity{KeyFile: "k.pem"}, "--etcd-key k.pem has no certificate"},
		{"etcd://a:2379", EtcdSecurity{PasswordFile: "pw"}, "--etcd-password-file is set without a user; give the etcd user in --etcd-username"},
		{"etcd://a:2379", EtcdSecurity{Username: "u"}, `--etcd-username "u" has no password`},
		{"etcd://a:2379", EtcdSecurity{Username: "u:x", PasswordFile: "pw"}, "contains ':'"},
	} {
		cfg := testConfig(t, "n", t.TempDir())
		cfg.Store, cfg.Etcd = tc.store, tc.etcd
		if err := cfg.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(store %s, %+v) = %v, want ErrConfig saying %q", tc.store, tc.etcd, err, tc.want)
		}
	}
	cfg := testConfig(t, "n", "")
	cfg.Store = "etcds://a:2379"
	cfg.Etcd = EtcdSecurity{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem", Username: "u", PasswordFile: "pw"}
	if err := cfg.Validate(); err != nil {
		t.Errorf("complete etcd settings: %v", err)
	}
}

func TestReadPasswordFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for content, want := range map[string]string{
		"s3cret":                  "s3cret",
		"s3cret\n":                "s3cret",
		"s3cret\r\n":              "s3cret",
		"with spaces \nnext":      "with spaces ",
		strings.Repeat("x", 4096): strings.Repeat("x", 4096),
	} {
		got, err := readPasswordFile(write("pw", content), nil)
		if err != nil || got != want {
			t.Errorf("password file %q: read %q, %v; want %q", content, got, err, want)
		}
	}
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing"), "no such file"},
		{write("empty", ""), "holds no password"},
		{write("newline", "\nsecret"), "holds no password on its first line"},
		{write("long", strings.Repeat("x", 4097)), "longer than 4096 bytes"},
	} {
		if _, err := readPasswordFile(tc.path, nil); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("password file %s: %v, want ErrConfig saying %q", filepath.Base(tc.path), err, tc.want)
		}
	}
}

// TestAgentsOnSecureEtcd: an Assigner and a Backup reach an etcd that
// requires client certificates and passwords, from the settings the flags
// give; the Backup streams what the Assigner commits. A wrong password
// stops New with what to fix.
func TestAgentsOnSecureEtcd(t *testing.T) {
	serverCA, clientCA := etcdtest.NewCA(t, "etcd-server"), etcdtest.NewCA(t, "etcd-client")
	scert, skey := serverCA.Issue(t, "etcd")
	srv := etcdtest.Start(t, etcdtest.TLS(scert, skey, clientCA.CertFile))
	ccert, ckey := clientCA.Issue(t, "slicerd-node")
	etcdtest.EnableAuth(t, srv.Client(t, serverCA.ClientTLS(t, ccert, ckey), "", ""),
		etcdtest.User{Name: "assigner", Password: "a-secret", Prefix: "/secure/", Write: true},
		etcdtest.User{Name: "backup", Password: "b-secret", Prefix: "/secure/"})
	dir := t.TempDir()
	pwFile := func(pw string) string {
		path := filepath.Join(dir, pw)
		if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	store := "etcds://" + srv.Endpoint() + "/secure/"
	sec := func(user, pw string) EtcdSecurity {
		return EtcdSecurity{CAFile: serverCA.CertFile, CertFile: ccert, KeyFile: ckey, Username: user, PasswordFile: pwFile(pw)}
	}

	bad := testConfig(t, "assigner-0", "", gossip.RoleAssigner)
	bad.Store, bad.Etcd = store, sec("assigner", "guess")
	a, err := New(context.Background(), bad)
	if err == nil {
		a.closeStore()
		a.listener.Close()
		t.Fatal("New with a wrong etcd password succeeded")
	}
	if !errors.Is(err, etcdstore.ErrAuth) || !strings.Contains(err.Error(), "--etcd-password-file") {
		t.Fatalf("New with a wrong etcd password: %v, want ErrAuth naming --etcd-password-file", err)
	}

	acfg := testConfig(t, "assigner-1", "", gossip.RoleAssigner)
	acfg.Store, acfg.Etcd = store, sec("assigner", "a-secret")
	assigner := startAgent(t, acfg)
	bcfg := testConfig(t, "backup-1", "", gossip.RoleBackup)
	bcfg.Store, bcfg.Etcd = store, sec("backup", "b-secret")
	backup := startAgent(t, bcfg)

	taskMember(t, "kv", "t0", assigner.GossipAddr())
	testwait.For(t, "the first commit", func() bool {
		rec, err := backup.store.Load(context.Background(), "kv")
		return err == nil && rec.Generation() > 0
	})
	bk := watchJob(t, backup.RPCAddr(), "kv", true)
	bk.until(t, "backup serving t0", hasTasks("t0"))
}
