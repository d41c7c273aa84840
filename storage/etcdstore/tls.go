package etcdstore

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/slicerd/slicerd/storage"
)

// TLS says how a Store connects to etcd over TLS (etcd's --cert-file and
// --key-file, and with --client-cert-auth its --trusted-ca-file). The files
// are PEM, as etcdctl's --cacert, --cert and --key take them, and are read
// again when they change on disk (checked at most once per
// certReloadInterval, at a connection's handshake), so rotating a
// certificate, a key or the CA bundle needs no restart: the next
// connection to etcd uses the new files. Replace each file in one rename
// (as cert-manager and Kubernetes secret volumes do); a file caught
// half-written keeps the previous version in use until the next check.
//
// The files are read by the slicerd process only; keep the key readable
// by its user alone. Following them costs at most one read of each file
// (at most 4 MiB) per certReloadInterval, made by a handshake, and one
// parse of a file that changed; nothing runs between handshakes.
type TLS struct {
	// CAFile is the bundle of CA certificates that etcd's server
	// certificate must chain to; "" uses the system's roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and its key that
	// etcd's --client-cert-auth asks for; both or neither. With etcd's
	// authentication on, the certificate's common name is the etcd user.
	CertFile, KeyFile string
	// Config, if not nil, is the base of every handshake's configuration
	// (cipher suites, a ServerName other than the endpoint's host); the
	// files above replace its RootCAs and client certificates.
	Config *tls.Config
}

// certReloadInterval is the least time between two checks of the files for
// changes: a reconnecting client does not stat them on every attempt.
const certReloadInterval = time.Second

// validate reports a half-given client certificate.
func (t *TLS) validate() error {
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return fmt.Errorf("%w: the etcd client certificate %s has no key; give its key file too (--etcd-key)", storage.ErrInvalid, t.CertFile)
	case t.CertFile == "" && t.KeyFile != "":
		return fmt.Errorf("%w: the etcd client key %s has no certificate; give the certificate file too (--etcd-cert)", storage.ErrInvalid, t.KeyFile)
	}
	return nil
}

// certFiles holds the parsed CA pool and client certificate, and parses
// the files again when their contents changed. A file that does not parse
// (a rotation caught half-written) keeps the previous version in use,
// logged, until a later check finds it whole.
//
// A change is found by comparing contents, not size and modification time:
// a replacement of the same size renamed into place within one tick of the
// kernel's file clock has the same stamp as the file it replaced.
type certFiles struct {
	ca, cert, key string
	log           *slog.Logger
	now           func() time.Time

	mu      sync.Mutex
	checked time.Time
	caPEM   []byte
	crtPEM  [2][]byte
	pool    *x509.CertPool
	client  *tls.Certificate
}

// maxCertFile bounds what is read of one certificate, key or CA file: a
// bundle of a few hundred CAs fits.
const maxCertFile = 4 << 20

func readCertFile(path, what, flag string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (%s): %w", ErrTLS, what, flag, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCertFile+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s (%s): %w", ErrTLS, what, flag, err)
	}
	if len(b) > maxCertFile {
		return nil, fmt.Errorf("%w: %s %s is larger than %d MiB; give a PEM file (%s)", ErrTLS, what, path, maxCertFile>>20, flag)
	}
	return b, nil
}

// newCertFiles reads the files once, so that a missing or invalid file is
// an error at Open rather than at the first handshake.
func newCertFiles(t TLS, log *slog.Logger) (*certFiles, error) {
	f := &certFiles{ca: t.CAFile, cert: t.CertFile, key: t.KeyFile, log: log, now: time.Now}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.reloadLocked(true); err != nil {
		return nil, err
	}
	return f, nil
}

// current returns the CA pool (nil: system roots) and client certificate
// (nil: none), checking the files for changes if the last check is older
// than certReloadInterval.
func (f *certFiles) current() (*x509.CertPool, *tls.Certificate) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := f.now(); now.Sub(f.checked) >= certReloadInterval {
		f.checked = now
		if err := f.reloadLocked(false); err != nil {
			f.log.Warn("etcd TLS files changed but cannot be read; using the previous ones until they can", "err", err)
		}
	}
	return f.pool, f.client
}

// reloadLocked parses the files whose contents changed since they were
// last parsed, or all of them when first. It keeps the previous versions on
// an error.
func (f *certFiles) reloadLocked(first bool) error {
	if f.ca != "" {
		b, err := readCertFile(f.ca, "etcd CA file", "--etcd-ca")
		if err != nil {
			return err
		}
		if first || !bytes.Equal(b, f.caPEM) {
			pool, err := parsePool(f.ca, b)
			if err != nil {
				return err
			}
			f.pool, f.caPEM = pool, b
			if !first {
				f.log.Info("etcd CA file changed; new connections verify etcd with it", "file", f.ca)
			}
		}
	}
	if f.cert != "" {
		cb, err := readCertFile(f.cert, "etcd client certificate", "--etcd-cert")
		if err != nil {
			return err
		}
		kb, err := readCertFile(f.key, "etcd client key", "--etcd-key")
		if err != nil {
			return err
		}
		if first || !bytes.Equal(cb, f.crtPEM[0]) || !bytes.Equal(kb, f.crtPEM[1]) {
			pair, err := tls.X509KeyPair(cb, kb)
			if err != nil {
				return fmt.Errorf("%w: etcd client certificate %s and key %s: %w; give a PEM certificate (--etcd-cert) and its matching PEM key (--etcd-key)",
					ErrTLS, f.cert, f.key, err)
			}
			f.client, f.crtPEM = &pair, [2][]byte{cb, kb}
			if !first {
				f.log.Info("etcd client certificate changed; new connections present it", "file", f.cert)
			}
		}
	}
	return nil
}

func readPool(path string) (*x509.CertPool, error) {
	b, err := readCertFile(path, "etcd CA file", "--etcd-ca")
	if err != nil {
		return nil, err
	}
	return parsePool(path, b)
}

func parsePool(path string, pem []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: etcd CA file %s holds no PEM certificate; give the CA that signed etcd's server certificate (etcdctl's --cacert)", ErrTLS, path)
	}
	return pool, nil
}

// config is the configuration of one handshake with serverName: the base,
// the current CA pool and client certificate.
func (f *certFiles) config(base *tls.Config, serverName string) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		cfg = base.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = serverName
	}
	pool, client := f.current()
	if f.ca != "" {
		cfg.RootCAs = pool
	}
	if f.cert != "" {
		cfg.Certificates = nil
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return client, nil }
	}
	return cfg
}

// reloadingCreds are gRPC transport credentials that build each handshake's
// TLS configuration from the current files. A handshake verifies etcd's
// certificate as crypto/tls does, against the endpoint's host name or IP
// address, which a shared tls.Config could not do for IP endpoints: its
// callbacks are not told the address dialled.
type reloadingCreds struct {
	files      *certFiles
	base       *tls.Config
	serverName string // set by OverrideServerName; "" = the endpoint's host
}

var _ credentials.TransportCredentials = (*reloadingCreds)(nil)

// ClientHandshake implements credentials.TransportCredentials.
func (c *reloadingCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	name := c.serverName
	if name == "" {
		name = hostOf(authority)
	}
	return credentials.NewTLS(c.files.config(c.base, name)).ClientHandshake(ctx, authority, conn)
}

// ServerHandshake implements credentials.TransportCredentials; a Store
// never serves.
func (c *reloadingCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("etcdstore: the etcd client's credentials cannot serve")
}

// Info implements credentials.TransportCredentials.
func (c *reloadingCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2", ServerName: c.serverName}
}

// Clone implements credentials.TransportCredentials.
func (c *reloadingCreds) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}

// OverrideServerName implements credentials.TransportCredentials.
func (c *reloadingCreds) OverrideServerName(name string) error {
	c.serverName = name
	return nil
}

// handshake dials addr and runs one TLS handshake as the client would, then
// sends the HTTP/2 preface and waits up to timeout for an answer: over TLS
// 1.3 a server refuses a client certificate only after the client's side of
// the handshake is done. It returns nil if etcd answered.
func (c *reloadingCreds) handshake(addr string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	tconn := tls.Client(conn, c.files.config(c.base, hostOf(addr)))
	if err := tconn.Handshake(); err != nil {
		// A TLS server answers a hello at once, with an alert if it
		// must refuse; a plaintext etcd closes the connection.
		var ne net.Error
		if errors.Is(err, io.EOF) || errors.As(err, &ne) && ne.Timeout() {
			return errNoHandshake
		}
		return err
	}
	if _, err := tconn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
		return err
	}
	var b [1]byte
	if _, err := tconn.Read(b[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil // no alert: the server took the certificate
		}
		return err
	}
	return nil
}

// errNoHandshake: a server accepted the connection but closed it or kept
// silent at the TLS handshake, as a plaintext etcd does.
var errNoHandshake = errors.New("no answer to the TLS handshake")

// hostOf is the host of a host:port, or s itself without a port.
func hostOf(s string) string {
	if host, _, err := net.SplitHostPort(s); err == nil {
		return host
	}
	return s
}
