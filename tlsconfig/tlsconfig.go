// Package tlsconfig builds the TLS configurations of slicerd's RPC servers
// and clients from PEM files that may be replaced while the process runs:
// a certificate renewed on disk is used by the next handshake, without a
// restart.
//
// Peers are verified against the configured CA only, not against host
// names: a slicerd peer is known by the identity URIs in its certificate
// (package identity), which each caller checks for the role it expects.
package tlsconfig

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/slicerd/slicerd/identity"
)

// ErrConfig reports unusable TLS settings or files.
var ErrConfig = errors.New("tls configuration")

// ErrPeer reports a peer whose certificate is not acceptable.
var ErrPeer = errors.New("tls peer")

// recheck is the least time between two looks at the files' contents (one
// read of each, at most maxFile bytes); a handshake in between uses what
// was loaded.
const recheck = time.Second

// Files names PEM files: the certificate chain and private key this side
// presents, and the CA certificates it accepts peers from.
type Files struct {
	Cert, Key, CA string
}

// Enabled reports whether any file is set.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// Validate checks that the settings go together: a certificate needs its
// key and the other way round, and TLS needs a CA to verify peers by. With
// needCert, a certificate is required too (a server, or a peer that must
// prove who it is).
func (f Files) Validate(flagPrefix string, needCert bool) error {
	if (f.Cert == "") != (f.Key == "") {
		return fmt.Errorf("%w: --%scert and --%skey go together; give both or neither", ErrConfig, flagPrefix, flagPrefix)
	}
	if f.CA == "" {
		return fmt.Errorf("%w: --%sca is missing; it names the CA certificate peers are verified against", ErrConfig, flagPrefix)
	}
	if needCert && f.Cert == "" {
		return fmt.Errorf("%w: --%scert and --%skey are missing; this side must present a certificate", ErrConfig, flagPrefix, flagPrefix)
	}
	return nil
}

// Source holds the loaded files and reloads them when they change.
type Source struct {
	files Files
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate // nil without Cert
	ids     []identity.ID    // of cert's leaf
	pool    *x509.CertPool
	expiry  Expiry
	stamps  [3]stamp
	checked time.Time
}

// Expiry is when the loaded certificates stop being valid: the own
// certificate's leaf (zero without one) and the earliest of the CA file's
// certificates.
type Expiry struct {
	Cert, CA time.Time
}

// stamp is a digest of a file's contents. Size and modification time
// would miss a replacement of the same size renamed into place within one
// tick of the kernel's file clock.
type stamp [sha256.Size]byte

// maxFile bounds what is read of one certificate, key or CA file when
// looking for a change.
const maxFile = 4 << 20

// Load reads and checks the files at once, so that a bad path, key or CA
// surfaces at start with a message naming the file.
func Load(f Files, log *slog.Logger) (*Source, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{files: f, log: log, now: time.Now}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Files returns the files s reads.
func (s *Source) Files() Files { return s.files }

// Reload reads the files again now. On error the previous certificate and
// CA stay in use.
func (s *Source) Reload() error {
	stamps := s.stat()
	cert, ids, pool, exp, err := load(s.files, s.now())
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.cert, s.ids, s.pool, s.expiry, s.stamps, s.checked = cert, ids, pool, exp, stamps, s.now()
	s.mu.Unlock()
	return nil
}

// Expiry returns when the current certificate and CA expire.
func (s *Source) Expiry() Expiry {
	s.maybeReload()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expiry
}

// WarnExpiry logs a warning for each of the current certificate and CA
// that expires within within (or has expired), naming its file and what
// to do, and reports whether it warned.
func (s *Source) WarnExpiry(within time.Duration) bool {
	exp, now := s.Expiry(), s.now()
	warned := false
	for _, c := range []struct {
		what, file string
		at         time.Time
	}{{"certificate", s.files.Cert, exp.Cert}, {"CA certificate", s.files.CA, exp.CA}} {
		if c.at.IsZero() || c.at.Sub(now) > within {
			continue
		}
		warned = true
		if !c.at.After(now) {
			s.log.Error("TLS "+c.what+" has expired: peers refuse it; issue a new one and replace the file (it is reloaded without a restart)",
				"file", c.file, "not_after", c.at.UTC())
			continue
		}
		s.log.Warn("TLS "+c.what+" expires soon: issue a new one and replace the file before then (it is reloaded without a restart)",
			"file", c.file, "not_after", c.at.UTC(), "remaining", c.at.Sub(now).Round(time.Minute).String())
	}
	return warned
}

// IDs returns the slicerd identities of this side's own certificate.
func (s *Source) IDs() []identity.ID {
	s.maybeReload()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids
}

func (s *Source) stat() [3]stamp {
	var st [3]stamp
	for i, name := range []string{s.files.Cert, s.files.Key, s.files.CA} {
		if name == "" {
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		h := sha256.New()
		_, err = io.Copy(h, io.LimitReader(f, maxFile))
		f.Close()
		if err == nil {
			h.Sum(st[i][:0])
		}
	}
	return st
}

// maybeReload reloads the files when one changed since the last look,
// looking at most once per recheck interval.
func (s *Source) maybeReload() {
	s.mu.Lock()
	if s.now().Sub(s.checked) < recheck {
		s.mu.Unlock()
		return
	}
	s.checked = s.now()
	old := s.stamps
	s.mu.Unlock()
	stamps := s.stat()
	if stamps == old {
		return
	}
	if err := s.Reload(); err != nil {
		// Remember the broken files, so that they are read (and the
		// error logged) again only when one of them changes, not on
		// every recheck.
		s.mu.Lock()
		s.stamps = stamps
		s.mu.Unlock()
		s.log.Error("reloading TLS files failed; still using the previous ones", "err", err)
		return
	}
	s.log.Info("reloaded TLS files", "cert", s.files.Cert, "ca", s.files.CA)
}

func (s *Source) current() (*tls.Certificate, *x509.CertPool) {
	s.maybeReload()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cert, s.pool
}

func load(f Files, now time.Time) (*tls.Certificate, []identity.ID, *x509.CertPool, Expiry, error) {
	var exp Expiry
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, nil, nil, exp, fmt.Errorf("%w: read CA file: %w", ErrConfig, err)
	}
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, nil, exp, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrConfig, f.CA)
	}
	for rest := caPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil && (exp.CA.IsZero() || c.NotAfter.Before(exp.CA)) {
			exp.CA = c.NotAfter
		}
	}
	if f.Cert == "" {
		return nil, nil, pool, exp, nil
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, nil, nil, exp, fmt.Errorf("%w: certificate %s with key %s: %w", ErrConfig, f.Cert, f.Key, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, nil, nil, exp, fmt.Errorf("%w: certificate %s: %w", ErrConfig, f.Cert, err)
		}
	}
	// Expiry first: x509's own error would call an expired certificate
	// one the CA did not sign.
	switch {
	case now.After(leaf.NotAfter):
		return nil, nil, nil, exp, fmt.Errorf("%w: certificate %s expired on %s; issue a new one from the CA (slicerd tls init, or your own CA)",
			ErrConfig, f.Cert, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return nil, nil, nil, exp, fmt.Errorf("%w: certificate %s is not valid until %s; check this host's clock",
			ErrConfig, f.Cert, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: intermediates(cert.Certificate[1:]), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, CurrentTime: now}); err != nil {
		return nil, nil, nil, exp, fmt.Errorf("%w: certificate %s is not signed by the CA in %s: %w", ErrConfig, f.Cert, f.CA, err)
	}
	ids, err := identity.FromCert(leaf)
	if err != nil {
		return nil, nil, nil, exp, fmt.Errorf("%w: certificate %s: %w", ErrConfig, f.Cert, err)
	}
	exp.Cert = leaf.NotAfter
	return &cert, ids, pool, exp, nil
}

func intermediates(ders [][]byte) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, der := range ders {
		if c, err := x509.ParseCertificate(der); err == nil {
			pool.AddCert(c)
		}
	}
	return pool
}

// ServerConfig returns the configuration of an RPC server: it presents the
// current certificate, offers HTTP/2, and asks clients for a certificate,
// verifying one that is given against the current CA. A client without one
// gets through the handshake as anonymous; what it may call is decided per
// request.
func (s *Source) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := s.current()
			if cert == nil {
				return nil, fmt.Errorf("%w: no server certificate configured", ErrConfig)
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				NextProtos:   []string{"h2", "http/1.1"},
				Certificates: []tls.Certificate{*cert},
				ClientAuth:   tls.VerifyClientCertIfGiven,
				ClientCAs:    pool,
			}, nil
		},
	}
}

// Check decides whether a verified peer's identities are the ones a client
// wants to talk to.
type Check func(ids []identity.ID) error

// WantAgent accepts a slicerd agent in any of roles (any agent role when
// none is given).
func WantAgent(roles ...identity.Role) Check {
	return func(ids []identity.ID) error {
		for _, id := range ids {
			if id.IsAgent() && (len(roles) == 0 || contains(roles, id.Role)) {
				return nil
			}
		}
		return fmt.Errorf("%w: certificate names no slicerd %v identity (has %v)", ErrPeer, rolesText(roles), ids)
	}
}

// WantNode accepts gossip member node in role r: the check for a peer
// whose address was learned from gossip.
func WantNode(r identity.Role, node string) Check {
	return func(ids []identity.ID) error {
		for _, id := range ids {
			if id.Role == r && id.Node == node {
				return nil
			}
		}
		return fmt.Errorf("%w: certificate does not name %s %q (has %v)", ErrPeer, r, node, ids)
	}
}

// WantTask accepts task task of job job: the check for a task whose
// address was learned from an assignment (state handoff).
func WantTask(job, task string) Check {
	return func(ids []identity.ID) error {
		if (identity.Principal{IDs: ids}).TaskOf(job, task) {
			return nil
		}
		return fmt.Errorf("%w: certificate does not name task %s/%s (has %v)", ErrPeer, job, task, ids)
	}
}

func contains(roles []identity.Role, r identity.Role) bool {
	for _, x := range roles {
		if x == r {
			return true
		}
	}
	return false
}

func rolesText(roles []identity.Role) string {
	if len(roles) == 0 {
		return "agent"
	}
	return fmt.Sprint(roles)
}

// ClientConfig returns the configuration of an RPC client: it presents the
// current certificate when there is one, and accepts a server whose chain
// leads to the current CA and whose identities pass check.
func (s *Source) ClientConfig(check Check) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		// Host names play no part: VerifyConnection checks the chain
		// against the CA and the identity against check.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return s.VerifyPeer(cs.PeerCertificates, x509.ExtKeyUsageServerAuth, check)
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := s.current()
			if cert == nil {
				return &tls.Certificate{}, nil
			}
			return cert, nil
		},
	}
}

// VerifyPeer checks a peer's certificate chain against the current CA for
// usage, then its identities against check (nil accepts any).
func (s *Source) VerifyPeer(chain []*x509.Certificate, usage x509.ExtKeyUsage, check Check) error {
	if len(chain) == 0 {
		return fmt.Errorf("%w: peer presented no certificate", ErrPeer)
	}
	_, pool := s.current()
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Errorf("%w: %w", ErrPeer, err)
	}
	if check == nil {
		return nil
	}
	ids, err := identity.FromCert(chain[0])
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPeer, err)
	}
	return check(ids)
}
