package etcdtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// RootPassword is the password EnableAuth gives etcd's root user.
const RootPassword = "root-secret"

// User is an etcd user for EnableAuth: it may read the keys under Prefix,
// and write them too when Write.
type User struct {
	Name, Password, Prefix string
	Write                  bool
}

// EnableAuth turns etcd's authentication on through cli, as an operator
// would with etcdctl: a root user with RootPassword, and each of users
// with a role of the same name.
func EnableAuth(t testing.TB, cli *clientv3.Client, users ...User) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", RootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
	}
	for _, u := range users {
		perm := clientv3.PermissionType(clientv3.PermRead)
		if u.Write {
			perm = clientv3.PermissionType(clientv3.PermReadWrite)
		}
		steps = append(steps,
			func() error { _, err := cli.RoleAdd(ctx, u.Name); return err },
			func() error {
				_, err := cli.RoleGrantPermission(ctx, u.Name, u.Prefix, clientv3.GetPrefixRangeEnd(u.Prefix), perm)
				return err
			},
			func() error { _, err := cli.UserAdd(ctx, u.Name, u.Password); return err },
			func() error { _, err := cli.UserGrantRole(ctx, u.Name, u.Name); return err },
		)
	}
	steps = append(steps, func() error { _, err := cli.AuthEnable(ctx); return err })
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("etcdtest: enable authentication, step %d: %v", i+1, err)
		}
	}
}

// Client is a plain etcd client of the server, closed at the end of the
// test: over TLS with tlsCfg when the server serves TLS, and logged in as
// user when not "".
func (s *Server) Client(t testing.TB, tlsCfg *tls.Config, user, password string) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{
		Endpoints: []string{s.ClientURL()}, Username: user, Password: password,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
	}
	if s.tls.cert != "" {
		cfg.TLS = tlsCfg
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcdtest: client of %s: %v", s.ClientURL(), err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// ClientTLS is a client configuration that trusts ca and presents the
// certificate in certFile and keyFile, if not "".
func (ca *CA) ClientTLS(t testing.TB, certFile, keyFile string) *tls.Config {
	t.Helper()
	cfg := &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}
	cfg.RootCAs.AddCert(ca.cert)
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}
