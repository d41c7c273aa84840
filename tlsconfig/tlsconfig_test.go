package tlsconfig_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/tlsconfig"
	"github.com/slicerd/slicerd/tlsconfig/tlstest"
)

const day = 24 * time.Hour

// pki is a CA in a temporary directory.
type pki struct{ *tlstest.PKI }

func newPKI(t *testing.T, name string) *pki { return &pki{tlstest.New(t, name)} }

func (p *pki) issue(name string, ids ...identity.ID) tlsconfig.Files { return p.Issue(name, ids...) }

func (p *pki) load(f tlsconfig.Files) *tlsconfig.Source { return p.Load(f) }

func agent(node string) []identity.ID {
	return []identity.ID{
		{Role: identity.Assigner, Node: node},
		{Role: identity.Distributor, Node: node},
		{Role: identity.Backup, Node: node},
	}
}

// server accepts TLS connections on loopback with cfg and answers each
// with one line: the identities of the client's verified certificate, or
// "anonymous". Handshake errors are kept for the test to read.
type server struct {
	addr string

	mu   sync.Mutex
	errs []error
}

func serve(t *testing.T, cfg *tls.Config) *server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: l.Addr().String()}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.answer(tls.Server(c, cfg))
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	return s
}

func (s *server) answer(c *tls.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(testwait.Scale(testwait.Timeout)))
	if err := c.Handshake(); err != nil {
		s.mu.Lock()
		s.errs = append(s.errs, err)
		s.mu.Unlock()
		return
	}
	who := "anonymous"
	if pc := c.ConnectionState().PeerCertificates; len(pc) > 0 {
		ids, err := identity.FromCert(pc[0])
		if err != nil {
			who = "error: " + err.Error()
		} else {
			who = identity.Principal{IDs: ids}.String()
		}
	}
	_, _ = c.Write([]byte(who + "\n"))
}

func (s *server) handshakeErrors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}

// dial connects with cfg and returns what the server saw of the client.
// With TLS 1.3 a server's refusal of the client certificate arrives after
// the client's side of the handshake, so the error may come from the read.
func dial(t *testing.T, addr string, cfg *tls.Config) (string, error) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(testwait.Scale(testwait.Timeout)))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(line, "\n"), nil
}

func TestServerSeesClientIdentities(t *testing.T) {
	p := newPKI(t, "test CA")
	srv := serve(t, p.load(p.issue("n1", agent("n1")...)).ServerConfig())

	client := p.load(p.issue("task", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-0"}))
	got, err := dial(t, srv.addr, client.ClientConfig(tlsconfig.WantNode(identity.Assigner, "n1")))
	if err != nil {
		t.Fatal(err)
	}
	if want := "spiffe://slicerd/task/kv/kv-0"; got != want {
		t.Fatalf("server saw %q, want %q", got, want)
	}
}

func TestServerRefusesClientOfAnotherCA(t *testing.T) {
	p := newPKI(t, "test CA")
	srv := serve(t, p.load(p.issue("n1", agent("n1")...)).ServerConfig())

	// The stranger trusts the real CA (so it accepts the server) but
	// presents a certificate from its own CA, claiming to be an admin.
	other := newPKI(t, "stranger CA")
	f := other.issue("admin", identity.ID{Role: identity.Admin, Name: "ops"})
	src := other.load(f)
	cfg := src.ClientConfig(nil)
	// The stranger accepts the real server, checking it against the real CA.
	trustsReal := p.load(tlsconfig.Files{CA: p.CAFile})
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		return trustsReal.VerifyPeer(cs.PeerCertificates, x509.ExtKeyUsageServerAuth, nil)
	}
	got, err := dial(t, srv.addr, cfg)
	if err == nil {
		t.Fatalf("server answered %q to a client certificate from another CA", got)
	}
	testwait.For(t, "the server's handshake error", func() bool { return len(srv.handshakeErrors()) > 0 })
	if errs := srv.handshakeErrors(); !strings.Contains(errs[0].Error(), "unknown authority") {
		t.Fatalf("server handshake error %q does not say the certificate's authority is unknown", errs[0])
	}
}

func TestServerLetsClientWithoutCertificateInAsAnonymous(t *testing.T) {
	p := newPKI(t, "test CA")
	srv := serve(t, p.load(p.issue("n1", agent("n1")...)).ServerConfig())

	client := p.load(tlsconfig.Files{CA: p.CAFile})
	if ids := client.IDs(); len(ids) != 0 {
		t.Fatalf("a Source without a certificate has identities %v", ids)
	}
	got, err := dial(t, srv.addr, client.ClientConfig(tlsconfig.WantAgent()))
	if err != nil {
		t.Fatal(err)
	}
	if got != "anonymous" {
		t.Fatalf("server saw %q, want anonymous", got)
	}
}

func TestServerWithoutCertificateFailsHandshake(t *testing.T) {
	p := newPKI(t, "test CA")
	srv := serve(t, p.load(tlsconfig.Files{CA: p.CAFile}).ServerConfig())
	if got, err := dial(t, srv.addr, p.load(tlsconfig.Files{CA: p.CAFile}).ClientConfig(nil)); err == nil {
		t.Fatalf("a server without a certificate answered %q", got)
	}
	testwait.For(t, "the server's handshake error", func() bool { return len(srv.handshakeErrors()) > 0 })
	if err := srv.handshakeErrors()[0]; !errors.Is(err, tlsconfig.ErrConfig) {
		t.Fatalf("server handshake error %v, want ErrConfig", err)
	}
}

func TestClientChecksServer(t *testing.T) {
	p := newPKI(t, "test CA")
	srv := serve(t, p.load(p.issue("n1", agent("n1")...)).ServerConfig())
	client := p.load(p.issue("client", identity.ID{Role: identity.Client, Job: identity.Any}))

	for _, tc := range []struct {
		name  string
		check tlsconfig.Check
		ok    bool
		msg   string
	}{
		{"right node", tlsconfig.WantNode(identity.Assigner, "n1"), true, ""},
		{"any agent", tlsconfig.WantAgent(), true, ""},
		{"backup role", tlsconfig.WantAgent(identity.Backup), true, ""},
		{"wrong node", tlsconfig.WantNode(identity.Assigner, "n2"), false, `does not name assigner "n2"`},
		{"not an agent", func(ids []identity.ID) error {
			for _, id := range ids {
				if id.Role == identity.Admin {
					return nil
				}
			}
			return tlsconfig.ErrPeer
		}, false, "tls peer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dial(t, srv.addr, client.ClientConfig(tc.check))
			if tc.ok {
				if err != nil || got != "spiffe://slicerd/client/*" {
					t.Fatalf("dial = %q, %v; want the server to see the client", got, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("client accepted a server that fails its check; server saw %q", got)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("dial error %q does not say %q", err, tc.msg)
			}
		})
	}
}

func TestClientRefusesServerOfAnotherCA(t *testing.T) {
	p := newPKI(t, "test CA")
	other := newPKI(t, "stranger CA")
	// The stranger's server claims the right node name.
	srv := serve(t, other.load(other.issue("n1", agent("n1")...)).ServerConfig())
	client := p.load(p.issue("client", identity.ID{Role: identity.Client, Job: "kv"}))
	got, err := dial(t, srv.addr, client.ClientConfig(tlsconfig.WantNode(identity.Assigner, "n1")))
	if err == nil {
		t.Fatalf("client accepted a server from another CA; server saw %q", got)
	}
	if !errors.Is(err, tlsconfig.ErrPeer) || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("dial error %v, want ErrPeer naming the unknown authority", err)
	}
}

func TestRotatedCertificateIsPresentedWithoutRestart(t *testing.T) {
	p := newPKI(t, "test CA")
	files := p.issue("server", agent("n1")...)
	server := p.load(files)
	srv := serve(t, server.ServerConfig())
	client := p.load(p.issue("client", identity.ID{Role: identity.Client, Job: "kv"}))

	if _, err := dial(t, srv.addr, client.ClientConfig(tlsconfig.WantNode(identity.Assigner, "n1"))); err != nil {
		t.Fatal(err)
	}

	// Renew the certificate in place with a new identity, as a
	// certificate manager would.
	if got := p.issue("server", agent("n2")...); got != files {
		t.Fatalf("reissued files %+v, want the same paths %+v", got, files)
	}
	testwait.For(t, "the server to present n2's certificate", func() bool {
		_, err := dial(t, srv.addr, client.ClientConfig(tlsconfig.WantNode(identity.Assigner, "n2")))
		return err == nil
	})
	if _, err := dial(t, srv.addr, client.ClientConfig(tlsconfig.WantNode(identity.Assigner, "n1"))); err == nil {
		t.Fatal("the server still presents n1's certificate after the rotation")
	}
	if ids := server.IDs(); len(ids) != 3 || ids[0] != (identity.ID{Role: identity.Assigner, Node: "n2"}) {
		t.Fatalf("server Source IDs = %v after the rotation, want n2's", ids)
	}
}

func TestRotatedClientCertificateIsPresented(t *testing.T) {
	p := newPKI(t, "test CA")
	srv := serve(t, p.load(p.issue("n1", agent("n1")...)).ServerConfig())
	files := p.issue("task", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-0"})
	client := p.load(files)
	p.issue("task", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-1"})
	testwait.For(t, "the client to present kv-1's certificate", func() bool {
		got, err := dial(t, srv.addr, client.ClientConfig(nil))
		return err == nil && got == "spiffe://slicerd/task/kv/kv-1"
	})
}

func TestLoadNamesTheBadFile(t *testing.T) {
	p := newPKI(t, "test CA")
	good := p.issue("n1", agent("n1")...)
	other := p.issue("n2", agent("n2")...)
	foreign := newPKI(t, "stranger CA").issue("n1", agent("n1")...)
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")

	for _, tc := range []struct {
		name  string
		files tlsconfig.Files
		says  []string
	}{
		{"CA file is not PEM", tlsconfig.Files{Cert: good.Cert, Key: good.Key, CA: garbage}, []string{garbage, "no PEM certificate"}},
		{"CA file is missing", tlsconfig.Files{Cert: good.Cert, Key: good.Key, CA: missing}, []string{missing, "no such file"}},
		{"CA file is a key", tlsconfig.Files{Cert: good.Cert, Key: good.Key, CA: good.Key}, []string{good.Key, "no PEM certificate"}},
		{"key does not match", tlsconfig.Files{Cert: good.Cert, Key: other.Key, CA: p.CAFile}, []string{good.Cert, other.Key, "does not match"}},
		{"certificate is not PEM", tlsconfig.Files{Cert: garbage, Key: good.Key, CA: p.CAFile}, []string{garbage}},
		{"key is missing", tlsconfig.Files{Cert: good.Cert, Key: missing, CA: p.CAFile}, []string{missing}},
		{"certificate of another CA", tlsconfig.Files{Cert: foreign.Cert, Key: foreign.Key, CA: p.CAFile}, []string{foreign.Cert, p.CAFile, "not signed by the CA"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tlsconfig.Load(tc.files, nil)
			if err == nil {
				t.Fatalf("Load(%+v) = %v, want an error", tc.files, s)
			}
			if !errors.Is(err, tlsconfig.ErrConfig) {
				t.Fatalf("Load: %v does not wrap ErrConfig", err)
			}
			for _, want := range tc.says {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Load error %q does not say %q", err, want)
				}
			}
		})
	}
}

func TestReloadKeepsPreviousFilesWhenNewOnesAreBroken(t *testing.T) {
	p := newPKI(t, "test CA")
	files := p.issue("server", agent("n1")...)
	server := p.load(files)
	srv := serve(t, server.ServerConfig())
	client := p.load(p.issue("client", identity.ID{Role: identity.Client, Job: "kv"}))

	// A new certificate whose key was not written yet: the pair does not match.
	stray := p.issue("stray", agent("n2")...)
	certPEM, err := os.ReadFile(stray.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.Cert, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := server.Reload(); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("Reload with a mismatched key = %v, want an error saying so", err)
	}
	if _, err := dial(t, srv.addr, client.ClientConfig(tlsconfig.WantNode(identity.Assigner, "n1"))); err != nil {
		t.Fatalf("after a failed reload the server no longer presents n1's certificate: %v", err)
	}
	if ids := server.IDs(); len(ids) == 0 || ids[0].Node != "n1" {
		t.Fatalf("IDs after a failed reload = %v, want n1's", ids)
	}

	// A broken CA file keeps the previous CA too.
	if err := os.WriteFile(p.CAFile, []byte("truncated"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := server.Reload(); err == nil || !strings.Contains(err.Error(), p.CAFile) {
		t.Fatalf("Reload with a broken CA file = %v, want an error naming it", err)
	}
	if _, err := dial(t, srv.addr, client.ClientConfig(tlsconfig.WantNode(identity.Assigner, "n1"))); err != nil {
		t.Fatalf("after a failed CA reload the server refuses a client of the CA: %v", err)
	}

	// Once the key arrives and the CA is back, the next reload takes both.
	keyPEM, err := os.ReadFile(stray.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.Key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.CAFile, p.CA.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := server.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, srv.addr, client.ClientConfig(tlsconfig.WantNode(identity.Assigner, "n2"))); err != nil {
		t.Fatalf("after a good reload the server does not present n2's certificate: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		files    tlsconfig.Files
		needCert bool
		says     string
	}{
		{tlsconfig.Files{Cert: "c", CA: "ca"}, false, "--tls-cert and --tls-key go together"},
		{tlsconfig.Files{Key: "k", CA: "ca"}, false, "--tls-cert and --tls-key go together"},
		{tlsconfig.Files{Cert: "c", Key: "k"}, false, "--tls-ca is missing"},
		{tlsconfig.Files{CA: "ca"}, true, "--tls-cert and --tls-key are missing"},
		{tlsconfig.Files{CA: "ca"}, false, ""},
		{tlsconfig.Files{Cert: "c", Key: "k", CA: "ca"}, true, ""},
	} {
		err := tc.files.Validate("tls-", tc.needCert)
		if tc.says == "" {
			if err != nil {
				t.Errorf("Validate(%+v, %v) = %v, want nil", tc.files, tc.needCert, err)
			}
			continue
		}
		if !errors.Is(err, tlsconfig.ErrConfig) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Validate(%+v, %v) = %v, want ErrConfig saying %q", tc.files, tc.needCert, err, tc.says)
		}
	}
}
