package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slicerd/slicerd/roles"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

func TestEtcdSecurityFlags(t *testing.T) {
	cfg, code, out := agentConfigOf(t, nil)
	if code != 0 || cfg.Etcd != (roles.EtcdSecurity{}) {
		t.Errorf("defaults: %+v, exit %d: %s; want no etcd TLS or login", cfg.Etcd, code, out)
	}
	want := roles.EtcdSecurity{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem", Username: "slicerd", PasswordFile: "pw"}
	cfg, code, out = agentConfigOf(t, map[string]string{
		"SLICERD_STORE": "etcds://10.0.0.1:2379", "SLICERD_ETCD_CA": "ca.pem", "SLICERD_ETCD_CERT": "c.pem",
		"SLICERD_ETCD_KEY": "k.pem", "SLICERD_ETCD_USERNAME": "slicerd", "SLICERD_ETCD_PASSWORD_FILE": "pw",
	})
	if code != 0 || cfg.Etcd != want {
		t.Errorf("from the environment: %+v, exit %d: %s; want %+v", cfg.Etcd, code, out, want)
	}
}

func TestEtcdSecurityFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--etcd-ca", "ca.pem"}, "--etcd-ca is set but the store is not etcd"},
		{[]string{"--store", "etcd://a:2379", "--etcd-password-file", "pw"}, "--etcd-password-file is set without a user"},
		{[]string{"--store", "etcd://a:2379", "--etcd-cert", "c.pem"}, "--etcd-cert c.pem has no key"},
		{[]string{"--store", "etcds://a:2379", "--etcd-username", "u"}, `--etcd-username "u" has no password`},
	} {
		if _, code, out := agentConfigOf(t, nil, tc.args...); code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d: %s; want exit 2 saying %q", tc.args, code, out, tc.want)
		}
	}
}

// TestStartOnSecureEtcd: a node started with the documented flags reaches
// an etcd that requires client certificates and a password.
func TestStartOnSecureEtcd(t *testing.T) {
	serverCA, clientCA := etcdtest.NewCA(t, "etcd-server"), etcdtest.NewCA(t, "etcd-client")
	scert, skey := serverCA.Issue(t, "etcd")
	srv := etcdtest.Start(t, etcdtest.TLS(scert, skey, clientCA.CertFile))
	ccert, ckey := clientCA.Issue(t, "slicerd-node")
	etcdtest.EnableAuth(t, srv.Client(t, serverCA.ClientTLS(t, ccert, ckey), "", ""),
		etcdtest.User{Name: "slicerd", Password: "s3cret", Prefix: "/cli-tls/", Write: true})
	pw := filepath.Join(t.TempDir(), "etcd-password")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := "etcds://" + srv.Endpoint() + "/cli-tls/"
	line := startLine(t, "--role", "assigner", "--store", store, "--etcd-ca", serverCA.CertFile,
		"--etcd-cert", ccert, "--etcd-key", ckey, "--etcd-username", "slicerd", "--etcd-password-file", pw)
	if !strings.Contains(line, "store="+store) {
		t.Errorf("start line lacks store=%s:\n%s", store, line)
	}
}
