package cli

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/tlsconfig"
)

// loadIDs loads a certificate written by tls init the way an agent does,
// and returns its identities as strings.
func loadIDs(t *testing.T, dir, name string) []string {
	t.Helper()
	src, err := tlsconfig.Load(tlsconfig.Files{
		Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: filepath.Join(dir, "ca.pem"),
	}, nil)
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	var ids []string
	for _, id := range src.IDs() {
		ids = append(ids, id.String())
	}
	return ids
}

func TestTLSInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	code, stdout, stderr := runCLI(t, "tls", "init", "--dir", dir, "--nodes", "n1,n2", "--node-roles", "assigner,backup",
		"--tasks", "kv/kv-0,kv/*", "--clients", "kv,*", "--admins", "ops", "--hosts", "127.0.0.1,localhost,::1", "--days", "30")
	if code != 0 {
		t.Fatalf("tls init: exit %d: %s", code, stderr)
	}
	for name, want := range map[string][]string{
		"n1":           {"spiffe://slicerd/assigner/n1", "spiffe://slicerd/backup/n1"},
		"n2":           {"spiffe://slicerd/assigner/n2", "spiffe://slicerd/backup/n2"},
		"task-kv-kv-0": {"spiffe://slicerd/task/kv/kv-0"},
		"task-kv-any":  {identity.ID{Role: identity.Task, Job: "kv", Task: identity.Any}.String()},
		"client-kv":    {"spiffe://slicerd/client/kv"},
		"client-any":   {identity.ID{Role: identity.Client, Job: identity.Any}.String()},
		"admin-ops":    {"spiffe://slicerd/admin/ops"},
	} {
		if got := loadIDs(t, dir, name); !slices.Equal(got, want) {
			t.Errorf("%s.pem names %v, want %v", name, got, want)
		}
		if fi, err := os.Stat(filepath.Join(dir, name+"-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s-key.pem: %v, mode %v; want 0600", name, err, fi.Mode().Perm())
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ca-key.pem: %v; want mode 0600", err)
	}
	for _, want := range []string{
		"created CA " + filepath.Join(dir, "ca.pem"),
		"--tls-cert " + filepath.Join(dir, "n1.pem") + " --tls-key " + filepath.Join(dir, "n1-key.pem") + " --tls-ca " + filepath.Join(dir, "ca.pem"),
		"wrote " + filepath.Join(dir, "admin-ops.pem"),
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}

	// Agent certificates carry --hosts so that host-checking clients accept them.
	cert := readCert(t, filepath.Join(dir, "n1.pem"))
	if !slices.Equal(cert.DNSNames, []string{"localhost"}) || len(cert.IPAddresses) != 2 || !cert.IPAddresses[1].Equal(net.IPv6loopback) {
		t.Errorf("n1.pem hosts: DNS %v, IPs %v; want localhost, 127.0.0.1, ::1", cert.DNSNames, cert.IPAddresses)
	}
	if d := cert.NotAfter.Sub(cert.NotBefore).Hours() / 24; d < 29 || d > 31 {
		t.Errorf("n1.pem is valid for %.1f days, want 30", d)
	}

	// A second run reuses the CA: earlier certificates still verify with
	// the CA file, and the new ones do too.
	caBefore, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	code, stdout, stderr = runCLI(t, "tls", "init", "--dir", dir, "--nodes", "n3")
	if code != 0 || !strings.Contains(stdout, "using the existing CA") {
		t.Fatalf("second tls init: exit %d: %s%s", code, stdout, stderr)
	}
	if caAfter, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(caAfter) != string(caBefore) {
		t.Fatal("the second run replaced ca.pem")
	}
	if got := loadIDs(t, dir, "n3"); len(got) != 3 {
		t.Errorf("n3.pem names %v, want the three agent roles", got)
	}
	loadIDs(t, dir, "n1")

	// An existing certificate is kept without --force, and nothing else
	// of that run is written.
	n1Before, _ := os.ReadFile(filepath.Join(dir, "n1.pem"))
	code, _, stderr = runCLI(t, "tls", "init", "--dir", dir, "--nodes", "n4,n1")
	if code != 1 || !strings.Contains(stderr, "not overwriting "+filepath.Join(dir, "n1.pem")) || !strings.Contains(stderr, "--force") {
		t.Fatalf("tls init over an existing certificate: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "n4.pem")); err == nil {
		t.Fatal("a refused run wrote n4.pem")
	}
	code, _, stderr = runCLI(t, "tls", "init", "--dir", dir, "--nodes", "n1", "--force")
	if code != 0 {
		t.Fatalf("tls init --force: exit %d: %s", code, stderr)
	}
	if n1After, _ := os.ReadFile(filepath.Join(dir, "n1.pem")); string(n1After) == string(n1Before) {
		t.Fatal("--force did not issue n1.pem again")
	}
	loadIDs(t, dir, "n1")
}

func TestTLSInitEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SLICERD_TLS_INIT_DIR", dir)
	t.Setenv("SLICERD_TLS_INIT_ADMINS", "alice")
	if code, _, stderr := runCLI(t, "tls", "init"); code != 0 {
		t.Fatalf("tls init from the environment: exit %d: %s", code, stderr)
	}
	if got := loadIDs(t, dir, "admin-alice"); !slices.Equal(got, []string{"spiffe://slicerd/admin/alice"}) {
		t.Fatalf("admin-alice.pem names %v", got)
	}
}

func TestTLSInitErrors(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	onlyCert := t.TempDir()
	if err := os.WriteFile(filepath.Join(onlyCert, "ca.pem"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	badCA := t.TempDir()
	for _, f := range []string{"ca.pem", "ca-key.pem"} {
		if err := os.WriteFile(filepath.Join(badCA, f), []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--tasks", "kv"}, 2, `invalid --tasks entry "kv": use JOB/TASK`},
		{[]string{"--tasks", "KV/kv-0"}, 2, `invalid --tasks entry "KV/kv-0"`},
		{[]string{"--tasks", "kv/-x"}, 2, `invalid --tasks entry "kv/-x"`},
		{[]string{"--tasks", "kv/a/b"}, 2, `invalid --tasks entry "kv/a/b"`},
		{[]string{"--tasks", "kv/any,kv/*"}, 2, "would both be written to task-kv-any.pem"},
		{[]string{"--clients", "Kv"}, 2, `invalid --clients entry "Kv"`},
		{[]string{"--nodes", "../n1"}, 2, `invalid --nodes entry "../n1"`},
		{[]string{"--admins", "a/b"}, 2, `invalid --admins entry "a/b"`},
		{[]string{"--nodes", "ca"}, 2, "ca.pem, the CA's file"},
		{[]string{"--nodes", "n1", "--node-roles", "task"}, 2, `invalid --node-roles entry "task"`},
		{[]string{"--nodes", "n1", "--node-roles", ","}, 2, "--node-roles is empty"},
		{[]string{"--nodes", "n1", "--hosts", "http://x"}, 2, `invalid --hosts entry "http://x"`},
		{[]string{"--nodes", "n1", "--days", "0"}, 2, "invalid --days 0"},
		{[]string{"--nodes", "n1", "--days", "x"}, 2, "flag -days: parse error (see 'slicerd tls init --help')"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--dir", filepath.Join(notDir, "certs"), "--nodes", "n1"}, 1, "cannot create --dir " + filepath.Join(notDir, "certs")},
		{[]string{"--dir", onlyCert, "--nodes", "n1"}, 1, "found only one of"},
		{[]string{"--dir", badCA, "--nodes", "n1"}, 1, "cannot use the existing CA"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := tc.args
			if !slices.Contains(args, "--dir") {
				args = append([]string{"--dir", t.TempDir()}, args...)
			}
			code, _, stderr := runCLI(t, append([]string{"tls", "init"}, args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.says) {
				t.Fatalf("exit %d, stderr %q; want exit %d saying %q", code, stderr, tc.code, tc.says)
			}
		})
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s holds no PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The CLI reads its own environment (SLICERD_CLIENT_*), not the agent's:
// a shell that sourced an agent's environment file, whose SLICERD_TLS_CERT
// is the node's server certificate and SLICERD_TOKEN_FILE its file of
// token secrets, still runs `job list` against a cleartext node.
func TestCLIIgnoresTheAgentsSecurityEnvironment(t *testing.T) {
	addr := startNode(t, gossip.RoleAssigner)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("ops secret-one\nci secret-two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLICERD_TLS_CERT", filepath.Join(dir, "node.pem"))
	t.Setenv("SLICERD_TLS_KEY", filepath.Join(dir, "node-key.pem"))
	t.Setenv("SLICERD_TLS_CA", filepath.Join(dir, "ca.pem"))
	t.Setenv("SLICERD_TOKEN_FILE", tokens)
	if code, _, stderr := runCLI(t, "job", "list", "--addr", addr); code != 0 {
		t.Fatalf("job list with an agent's environment set: exit %d: %s", code, stderr)
	}
	// Its own variables are read.
	t.Setenv("SLICERD_CLIENT_TOKEN_FILE", tokens)
	code, _, stderr := runCLI(t, "job", "list", "--addr", addr)
	if code != 2 || !strings.Contains(stderr, "--token-file needs TLS") {
		t.Errorf("job list with SLICERD_CLIENT_TOKEN_FILE and no TLS: exit %d: %s; want the usage error", code, stderr)
	}
}
