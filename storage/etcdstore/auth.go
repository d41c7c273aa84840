package etcdstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/slicerd/slicerd/storage"
)

// security is how a Store authenticates to etcd and etcd to it.
type security struct {
	creds *reloadingCreds // nil without TLS
	tls   TLS
	user  string // Options.Username
}

// secure completes cfg with the endpoints, TLS and credentials of opts, and
// rejects settings that cannot work together.
func secure(cfg *clientv3.Config, opts Options, log *slog.Logger) (security, error) {
	var sec security
	hasHTTPS, hasHTTP := false, false
	for _, e := range opts.Endpoints {
		switch {
		case strings.HasPrefix(e, "https://"):
			hasHTTPS = true
		case strings.HasPrefix(e, "http://"):
			hasHTTP = true
		}
	}
	t := opts.TLS
	if t == nil && hasHTTPS {
		t = &TLS{}
	}
	cfg.Endpoints = opts.Endpoints
	if t != nil {
		if hasHTTP {
			return sec, fmt.Errorf("%w: etcd endpoints %q mix http:// with TLS; give every endpoint as host:port or https://host:port",
				storage.ErrInvalid, opts.Endpoints)
		}
		if err := t.validate(); err != nil {
			return sec, err
		}
		files, err := newCertFiles(*t, log)
		if err != nil {
			return sec, err
		}
		cfg.Endpoints = make([]string, len(opts.Endpoints))
		for i, e := range opts.Endpoints {
			cfg.Endpoints[i] = "https://" + strings.TrimPrefix(e, "https://")
		}
		sec.creds = &reloadingCreds{files: files, base: t.Config}
		sec.tls = *t
		// The client's own TLS settings cannot follow files as they
		// change; its dial options come last and so take the place of
		// the transport credentials it derives from the https scheme.
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithTransportCredentials(sec.creds))
	}
	switch {
	case opts.Password != "" && opts.Username == "":
		return sec, fmt.Errorf("%w: an etcd password is given without a user name; give the user too (--etcd-username)", storage.ErrInvalid)
	case opts.Username != "" && opts.Password == "":
		return sec, fmt.Errorf("%w: etcd user %q has no password; give it in a file (--etcd-password-file), or drop the user and authenticate with a client certificate",
			storage.ErrInvalid, opts.Username)
	case opts.Username != "":
		if strings.Contains(opts.Username, ":") {
			return sec, fmt.Errorf("%w: etcd user name %q contains ':', which etcd does not allow", storage.ErrInvalid, opts.Username)
		}
		cfg.Username, cfg.Password = opts.Username, opts.Password
		sec.user = opts.Username
		if t == nil {
			log.Warn("the etcd password travels in cleartext; connect over TLS (etcds:// or --etcd-ca)")
		}
	}
	return sec, nil
}

// who names the etcd identity the store uses, for messages.
func (sec security) who() string {
	switch {
	case sec.user != "":
		return fmt.Sprintf("user %q", sec.user)
	case sec.tls.CertFile != "":
		if _, c := sec.creds.files.current(); c != nil && c.Leaf != nil {
			return fmt.Sprintf("user %q (the common name of %s)", c.Leaf.Subject.CommonName, sec.tls.CertFile)
		}
		return fmt.Sprintf("the user named by the common name of %s", sec.tls.CertFile)
	}
	return "no user"
}

// openError explains why Open's first round trip failed: refused
// credentials, a failed TLS handshake (found by trying one), or an etcd
// that cannot be reached.
func (s *Store) openError(ctx context.Context, err error, timeout time.Duration) error {
	if ctx.Err() != nil {
		return fmt.Errorf("storage: open etcd at %s: %w", s.endpoints, ctx.Err())
	}
	if aerr := s.authError("open", "the store under "+s.keys.prefix, err); aerr != nil {
		return aerr
	}
	var endpoints []string
	for _, e := range strings.Split(s.endpoints, ",") {
		endpoints = append(endpoints, strings.TrimPrefix(strings.TrimPrefix(e, "https://"), "http://"))
	}
	if s.sec.creds != nil {
		for _, e := range endpoints {
			if terr := s.tlsError(e, s.sec.creds.handshake(e, min(timeout, time.Second))); terr != nil {
				return terr
			}
		}
	}
	return fmt.Errorf("%w: cannot reach etcd at %s within %v: %v (%s); check --store and that etcd is running and reachable from this host",
		storage.ErrUnavailable, s.endpoints, timeout, err, probe(endpoints, timeout))
}

// tlsError turns a failed handshake with etcd at addr into what to fix;
// nil when err is no TLS problem (a refused connection, a timeout).
func (s *Store) tlsError(addr string, err error) error {
	if err == nil {
		return nil
	}
	ca := "the system's roots"
	if s.sec.tls.CAFile != "" {
		ca = s.sec.tls.CAFile
	}
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		header   tls.RecordHeaderError
		op       *net.OpError
	)
	switch {
	case errors.As(err, &unknown):
		return fmt.Errorf("%w: etcd at %s presented a certificate that no CA in %s signed (%v); give --etcd-ca the CA that signed etcd's --cert-file (etcdctl's --cacert)",
			ErrTLS, addr, ca, err)
	case errors.As(err, &hostname):
		return fmt.Errorf("%w: etcd at %s presented a certificate for other names (%v); name etcd in --store by a host name or IP address its certificate lists, or reissue it",
			ErrTLS, addr, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("%w: etcd at %s presented a certificate that is not valid now (%v); check etcd's --cert-file and this host's clock",
			ErrTLS, addr, err)
	case errors.Is(err, errNoHandshake):
		return fmt.Errorf("%w: etcd at %s accepted the connection but did not complete a TLS handshake; if it serves plaintext, use etcd:// without --etcd-ca and --etcd-cert, otherwise check that this is etcd's client port",
			ErrTLS, addr)
	case errors.As(err, &header):
		return fmt.Errorf("%w: etcd at %s does not answer TLS (%v); use etcd:// without --etcd-ca and --etcd-cert for a plaintext etcd, or the port of etcd's TLS listener",
			ErrTLS, addr, err)
	case errors.As(err, &op) && op.Op == "remote error":
		if s.sec.tls.CertFile == "" {
			return fmt.Errorf("%w: etcd at %s refused the connection (%v): it asks for a client certificate (etcd's --client-cert-auth); give --etcd-cert and --etcd-key (etcdctl's --cert and --key)",
				ErrTLS, addr, err)
		}
		return fmt.Errorf("%w: etcd at %s refused the client certificate %s (%v); it must be signed by a CA in etcd's --trusted-ca-file and allow client authentication",
			ErrTLS, addr, s.sec.tls.CertFile, err)
	}
	return nil
}

// authError explains an error of etcd's authentication; nil for others.
// what names what the call was about (the store, a job).
func (s *Store) authError(op, what string, err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrGRPCAuthFailed):
		return fmt.Errorf("%w: %s %s: etcd at %s refused %s: %w; check --etcd-username and the password in --etcd-password-file (try them with etcdctl --user)",
			ErrAuth, op, what, s.endpoints, s.sec.who(), err)
	case errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrGRPCUserEmpty):
		return fmt.Errorf("%w: %s %s: etcd at %s has authentication on and was given no user: %w; give --etcd-username and --etcd-password-file, or a client certificate (--etcd-cert) whose common name is an etcd user",
			ErrAuth, op, what, s.endpoints, err)
	case errors.Is(err, rpctypes.ErrUserNotFound), errors.Is(err, rpctypes.ErrGRPCUserNotFound):
		return fmt.Errorf("%w: %s %s: etcd at %s has no such user (%s): %w; create it (etcdctl user add) or give an existing one",
			ErrAuth, op, what, s.endpoints, s.sec.who(), err)
	case errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrGRPCPermissionDenied):
		need := "readwrite"
		if s.readOnly {
			need = "read"
		}
		return fmt.Errorf("%w: %s %s: etcd at %s denied %s access under %s: %w; grant the user a role with %s on the prefix (etcdctl role grant-permission ROLE --prefix=true %s %s)",
			ErrAuth, op, what, s.endpoints, s.sec.who(), s.keys.prefix, err, need, need, s.keys.prefix)
	}
	return nil
}
