package e2e

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/tlsconfig"
)

// TestTLSInitBinary runs 'slicerd tls init' as the secure setup does, then
// loads every file it wrote as an agent or a client would, and completes a
// mutual TLS handshake between two of them.
func TestTLSInitBinary(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	code, out := runSlicerd(t, "tls", "init", "--dir", dir, "--nodes", "n1,n2,n3",
		"--tasks", "kv/kv-0,kv/*", "--clients", "kv,*", "--admins", "ops", "--hosts", "127.0.0.1,localhost")
	if code != 0 {
		t.Fatalf("tls init: exit %d:\n%s", code, out)
	}

	load := func(f tlsconfig.Files) *tlsconfig.Source {
		t.Helper()
		src, err := tlsconfig.Load(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	// Every agent line of the output gives flags that load as that node.
	agents := map[string]*tlsconfig.Source{}
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) != 9 || fields[0] != "slicerd" || fields[1] != "--node-name" {
			continue
		}
		node := fields[2]
		f := tlsconfig.Files{Cert: fields[4], Key: fields[6], CA: fields[8]}
		if want := (tlsconfig.Files{Cert: filepath.Join(dir, node+".pem"), Key: filepath.Join(dir, node+"-key.pem"), CA: filepath.Join(dir, "ca.pem")}); f != want {
			t.Errorf("flags for %s name %+v, want %+v", node, f, want)
		}
		agents[node] = load(f)
		want := []identity.ID{{Role: identity.Assigner, Node: node}, {Role: identity.Distributor, Node: node}, {Role: identity.Backup, Node: node}}
		if got := agents[node].IDs(); !slices.Equal(got, want) {
			t.Errorf("%s.pem names %v, want %v", node, got, want)
		}
	}
	if len(agents) != 3 {
		t.Fatalf("output gives flags for %d agents, want 3:\n%s", len(agents), out)
	}

	others := map[string]identity.ID{
		"task-kv-kv-0": {Role: identity.Task, Job: "kv", Task: "kv-0"},
		"task-kv-any":  {Role: identity.Task, Job: "kv", Task: identity.Any},
		"client-kv":    {Role: identity.Client, Job: "kv"},
		"client-any":   {Role: identity.Client, Job: identity.Any},
		"admin-ops":    {Role: identity.Admin, Name: "ops"},
	}
	for name, want := range others {
		src := load(tlsconfig.Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: filepath.Join(dir, "ca.pem")})
		if got := src.IDs(); !slices.Equal(got, []identity.ID{want}) {
			t.Errorf("%s.pem names %v, want %v", name, got, want)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 + 2*(len(agents)+len(others)); len(entries) != want {
		t.Errorf("%s holds %d files, want %d", dir, len(entries), want)
	}

	// n1 serves; task kv-0 connects expecting assigner n1 and is seen as itself.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	seen := make(chan []identity.ID, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		tc := tls.Server(c, agents["n1"].ServerConfig())
		if err := tc.Handshake(); err != nil {
			seen <- nil
			return
		}
		ids, _ := identity.FromCert(tc.ConnectionState().PeerCertificates[0])
		seen <- ids
		_, _ = tc.Write([]byte{1})
	}()
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	task := load(tlsconfig.Files{Cert: filepath.Join(dir, "task-kv-kv-0.pem"), Key: filepath.Join(dir, "task-kv-kv-0-key.pem"), CA: filepath.Join(dir, "ca.pem")})
	c, err := tls.Dial("tcp", l.Addr().String(), task.ClientConfig(tlsconfig.WantNode(identity.Assigner, "n1")))
	if err != nil {
		t.Fatalf("task kv-0 dialing n1: %v", err)
	}
	defer c.Close()
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("reading from n1: %v", err)
	}
	if ids := <-seen; !slices.Equal(ids, []identity.ID{others["task-kv-kv-0"]}) {
		t.Fatalf("n1 saw the client as %v, want task kv/kv-0", ids)
	}

	// Adding a node later reuses the CA; reissuing one needs --force.
	code, out = runSlicerd(t, "tls", "init", "--dir", dir, "--nodes", "n4")
	if code != 0 || !strings.Contains(out, "using the existing CA") {
		t.Fatalf("tls init --nodes n4: exit %d:\n%s", code, out)
	}
	load(tlsconfig.Files{Cert: filepath.Join(dir, "n4.pem"), Key: filepath.Join(dir, "n4-key.pem"), CA: filepath.Join(dir, "ca.pem")})
	code, out = runSlicerd(t, "tls", "init", "--dir", dir, "--nodes", "n1")
	if code != 1 || !strings.Contains(out, "not overwriting "+filepath.Join(dir, "n1.pem")) {
		t.Fatalf("tls init over n1: exit %d:\n%s", code, out)
	}
}

func TestTLSInitBadInputBinary(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--dir", t.TempDir(), "--tasks", "kv-0"}, 2, `invalid --tasks entry "kv-0": use JOB/TASK, or JOB/* for any task of JOB`},
		{[]string{"--dir", t.TempDir(), "--tasks", "kv/bad task"}, 2, `invalid --tasks entry "kv/bad task"`},
		{[]string{"--dir", filepath.Join(file, "tls"), "--nodes", "n1"}, 1, "cannot create --dir " + filepath.Join(file, "tls")},
	} {
		code, out := runSlicerd(t, append([]string{"tls", "init"}, tc.args...)...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("tls init %v: exit %d, output %q; want exit %d saying %q", tc.args, code, out, tc.code, tc.want)
		}
	}
}
