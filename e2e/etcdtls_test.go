package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

// TestSecureEtcdStore: slicerd processes reach an etcd that requires
// client certificates and passwords, with the documented flags (and their
// environment variables): an Assigner commits a job's assignment and a
// Backup, logged in as a read-only user, serves it. A wrong password stops
// slicerd at start with what to fix.
func TestSecureEtcdStore(t *testing.T) {
	serverCA, clientCA := etcdtest.NewCA(t, "etcd-server"), etcdtest.NewCA(t, "etcd-client")
	scert, skey := serverCA.Issue(t, "etcd")
	etcd := etcdtest.Start(t, etcdtest.TLS(scert, skey, clientCA.CertFile))
	ccert, ckey := clientCA.Issue(t, "slicerd-node")
	etcdtest.EnableAuth(t, etcd.Client(t, serverCA.ClientTLS(t, ccert, ckey), "", ""),
		etcdtest.User{Name: "assigner", Password: "a-secret", Prefix: "/secure-e2e/", Write: true},
		etcdtest.User{Name: "backup", Password: "b-secret", Prefix: "/secure-e2e/"})
	dir := t.TempDir()
	pwFile := func(pw string) string {
		path := filepath.Join(dir, pw)
		if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	store := "etcds://" + etcd.Endpoint() + "/secure-e2e/"
	tlsFlags := []string{"--store", store, "--etcd-ca", serverCA.CertFile, "--etcd-cert", ccert, "--etcd-key", ckey}

	code, out := runSlicerd(t, append([]string{"--role", "assigner", "--node-name", "wrong", "--rpc-addr", "127.0.0.1:0",
		"--gossip-addr", "127.0.0.1:0", "--etcd-username", "assigner", "--etcd-password-file", pwFile("guess")}, tlsFlags...)...)
	if code != 1 || !strings.Contains(out, `refused user "assigner"`) || !strings.Contains(out, "--etcd-password-file") {
		t.Errorf("slicerd with a wrong etcd password: exit %d:\n%s\nwant exit 1 naming the user and --etcd-password-file", code, out)
	}

	assigner := startSlicerd(t, "assigner-0", append([]string{"--role", "assigner,distributor",
		"--etcd-username", "assigner", "--etcd-password-file", pwFile("a-secret")}, tlsFlags...)...)
	t.Setenv("SLICERD_ETCD_USERNAME", "backup")
	t.Setenv("SLICERD_ETCD_PASSWORD_FILE", pwFile("b-secret"))
	backup := startSlicerd(t, "backup-0", append([]string{"--role", "backup", "--join", assigner.gossipAddr}, tlsFlags...)...)
	startKV(t, "kv-0", assigner.gossipAddr)

	hc, rpcURL := rpcClient("kv")
	defer hc.CloseIdleConnections()
	client := slicerv1connect.NewBackupServiceClient(hc, rpcURL(backup.rpcAddr))
	testwait.Until(t, 60*time.Second, "the backup to serve the assignment of kv-0", func() bool {
		resp, err := client.GetAssignment(context.Background(), connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "kv"}))
		return err == nil && strings.Contains(resp.Msg.String(), "kv-0")
	})
}
