// Package etcdtest runs a real single-member etcd server in the test's
// process, on loopback with free ports and a temporary data directory, so
// that tests of the etcd store (and of anything built on it) need no etcd
// binary and download nothing. It is for tests only.
package etcdtest

import (
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/slicerd/slicerd/internal/testnet"
)

// startTimeout bounds how long a server may take to become ready.
const startTimeout = 30 * time.Second

// Server is an embedded etcd server. Stop and Restart keep its data
// directory and ports, so a test can take etcd away and bring the same data
// back.
type Server struct {
	t          testing.TB
	dir        string
	clientURL  url.URL
	peerURL    url.URL
	maxRequest uint
	quota      int64
	tls        tlsFiles

	mu   sync.Mutex
	etcd *embed.Etcd
}

// Option adjusts a Server before it starts.
type Option func(*Server)

// MaxRequestBytes sets the server's request size limit (etcd's
// --max-request-bytes; default 1.5 MiB).
func MaxRequestBytes(n uint) Option { return func(s *Server) { s.maxRequest = n } }

// QuotaBackendBytes sets the server's database size limit (etcd's
// --quota-backend-bytes; default 2 GiB), past which it refuses writes.
func QuotaBackendBytes(n int64) Option { return func(s *Server) { s.quota = n } }

// TLS serves clients over TLS with the PEM certificate and key files
// (etcd's --cert-file and --key-file); with clientCAFile not "", it also
// requires a client certificate signed by a CA in that file (etcd's
// --client-cert-auth and --trusted-ca-file). etcd reads the files at start,
// so a test can rewrite them and Restart. ClientURL is then https://.
func TLS(certFile, keyFile, clientCAFile string) Option {
	return func(s *Server) { s.tls = tlsFiles{certFile, keyFile, clientCAFile} }
}

type tlsFiles struct{ cert, key, clientCA string }

// Start starts a server and stops it at the end of the test.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{
		t:         t,
		dir:       t.TempDir(),
		clientURL: url.URL{Scheme: "http", Host: testnet.FreeAddr(t)},
		peerURL:   url.URL{Scheme: "http", Host: testnet.FreeAddr(t)},
	}
	for _, o := range opts {
		o(s)
	}
	if s.tls.cert != "" {
		s.clientURL.Scheme = "https"
	}
	if err := s.start(); err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Endpoint is the server's client address, host:port.
func (s *Server) Endpoint() string { return s.clientURL.Host }

// ClientURL is the server's client URL, http://host:port, or
// https://host:port with TLS.
func (s *Server) ClientURL() string { return s.clientURL.String() }

// Dir is the server's data directory.
func (s *Server) Dir() string { return s.dir }

// Stop stops the server, keeping its data; stopping a stopped server does
// nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd == nil {
		return
	}
	s.etcd.Close()
	s.etcd = nil
}

// Restart starts a stopped server again on the same data and ports.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("etcdtest: restart: %v", err)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd != nil {
		return fmt.Errorf("server at %s is already running", s.clientURL.Host)
	}
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = []url.URL{s.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{s.clientURL}
	cfg.ListenPeerUrls = []url.URL{s.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// bcrypt's least cost: authenticating a user with a password takes
	// microseconds, not a tenth of a second, in tests.
	cfg.BcryptCost = 4
	if s.maxRequest > 0 {
		cfg.MaxRequestBytes = s.maxRequest
	}
	if s.quota > 0 {
		cfg.QuotaBackendBytes = s.quota
	}
	if s.tls.cert != "" {
		cfg.ClientTLSInfo.CertFile = s.tls.cert
		cfg.ClientTLSInfo.KeyFile = s.tls.key
		cfg.ClientTLSInfo.TrustedCAFile = s.tls.clientCA
		cfg.ClientTLSInfo.ClientCertAuth = s.tls.clientCA != ""
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd in %s on %s: %w", s.dir, s.clientURL.Host, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd on %s failed to start: %w", s.clientURL.Host, err)
	case <-time.After(startTimeout):
		e.Close()
		return fmt.Errorf("etcd on %s not ready within %v", s.clientURL.Host, startTimeout)
	}
	s.etcd = e
	return nil
}

// MessagesReceived counts the gRPC messages the test process's etcd
// servers have received so far, by method (a unary call is one message; a
// stream, such as a keep-alive, one per message sent on it), from the
// servers' own metrics in the default Prometheus registry. Tests compare
// two counts to see what a piece of work asked of etcd.
func MessagesReceived(t testing.TB) map[string]float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatalf("gather etcd's metrics: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_msg_received_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "grpc_method" {
					out[lp.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("etcd's gRPC server metrics are not in the default Prometheus registry")
	}
	return out
}
