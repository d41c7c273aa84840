// Package tlstest issues slicerd certificates for tests from a throwaway
// CA in a temporary directory.
package tlstest

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/tlsconfig"
)

// Validity is how long the CA and the certificates it issues are valid.
const Validity = 24 * time.Hour

// PKI is a CA whose certificate is written to CAFile in Dir, where the
// certificates it issues are written too.
type PKI struct {
	t      testing.TB
	Dir    string
	CA     *tlsconfig.CA
	CAFile string
}

// New creates a CA named name in a temporary directory of t.
func New(t testing.TB, name string) *PKI {
	t.Helper()
	ca, err := tlsconfig.NewCA(name, Validity)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &PKI{t: t, Dir: dir, CA: ca, CAFile: filepath.Join(dir, "ca.pem")}
	if err := os.WriteFile(p.CAFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Issue issues a certificate naming ids (and 127.0.0.1, for clients that
// check host names) as NAME.pem and NAME-key.pem in Dir.
func (p *PKI) Issue(name string, ids ...identity.ID) tlsconfig.Files {
	p.t.Helper()
	f, err := p.CA.IssueFiles(p.Dir, name, p.CAFile, tlsconfig.Leaf{
		CommonName: name, IDs: ids, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: Validity,
	})
	if err != nil {
		p.t.Fatal(err)
	}
	return f
}

// Load loads f.
func (p *PKI) Load(f tlsconfig.Files) *tlsconfig.Source {
	p.t.Helper()
	s, err := tlsconfig.Load(f, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// Source issues a certificate naming ids and loads it.
func (p *PKI) Source(name string, ids ...identity.ID) *tlsconfig.Source {
	p.t.Helper()
	return p.Load(p.Issue(name, ids...))
}
