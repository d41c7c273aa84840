package roles

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/lease/etcdlease"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/etcdstore"
)

// StoreSpec is a parsed Config.Store.
type StoreSpec struct {
	// Etcd is false for the bbolt file in DataDir.
	Etcd bool
	// Endpoints are the etcd members, host:port.
	Endpoints []string
	// Prefix is the etcd key namespace; "" means etcdstore.DefaultPrefix.
	Prefix string
	// TLS is true for etcds://: etcd is reached over TLS even without
	// --etcd-ca (its certificate then verified against the system's roots).
	TLS bool
}

const (
	etcdScheme  = "etcd://"
	etcdsScheme = "etcds://"
)

// storeExample ends every store spec error.
const storeExample = `use "bolt" (the default: a file in --data-dir) or etcd://host:2379[,host2:2379][/prefix] (etcds:// for TLS)`

// ParseStore parses a store spec: "" or "bolt" for the bbolt file in the
// data directory, or etcd://host:port[,host:port...][/prefix] for etcd,
// etcds:// for etcd over TLS.
func ParseStore(spec string) (StoreSpec, error) {
	if spec == "" || spec == "bolt" {
		return StoreSpec{}, nil
	}
	rest, ok := strings.CutPrefix(spec, etcdScheme)
	secure := false
	if !ok {
		rest, ok = strings.CutPrefix(spec, etcdsScheme)
		secure = ok
	}
	if !ok {
		scheme, _, found := strings.Cut(spec, "://")
		if found {
			return StoreSpec{}, fmt.Errorf("%w: store %q has scheme %q, which slicerd does not know; %s", ErrConfig, spec, scheme, storeExample)
		}
		return StoreSpec{}, fmt.Errorf("%w: store %q is neither bolt nor an etcd:// address; %s", ErrConfig, spec, storeExample)
	}
	hosts, path, hasPath := strings.Cut(rest, "/")
	s := StoreSpec{Etcd: true, TLS: secure}
	if hasPath {
		s.Prefix = "/" + path
		if strings.Trim(path, "/") == "" {
			s.Prefix = ""
		}
	}
	if hosts == "" {
		return StoreSpec{}, fmt.Errorf("%w: store %q names no etcd host; %s", ErrConfig, spec, storeExample)
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return StoreSpec{}, fmt.Errorf("%w: store %q has an empty etcd host in its list; %s", ErrConfig, spec, storeExample)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return StoreSpec{}, fmt.Errorf("%w: etcd host %q in store %q is not host:port; %s", ErrConfig, h, spec, storeExample)
		}
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return StoreSpec{}, fmt.Errorf("%w: etcd host %q in store %q has an invalid port; use 1-65535 (etcd's client port is usually 2379)", ErrConfig, h, spec)
		}
		s.Endpoints = append(s.Endpoints, h)
	}
	if strings.ContainsAny(s.Prefix, " \t\n\x00") {
		return StoreSpec{}, fmt.Errorf("%w: store %q has a prefix with spaces or control characters; %s", ErrConfig, spec, storeExample)
	}
	return s, nil
}

// openStore opens the store cfg names; readOnly for a backup-only agent.
func openStore(ctx context.Context, cfg Config, readOnly bool) (storage.Store, error) {
	if cfg.OpenStore != nil {
		return cfg.OpenStore(readOnly)
	}
	spec, err := ParseStore(cfg.Store)
	if err != nil {
		return nil, err
	}
	if !spec.Etcd {
		return storage.OpenDataDir(cfg.DataDir, storage.BoltOptions{ReadOnly: readOnly, Logger: cfg.Logger})
	}
	opts := etcdstore.Options{
		Endpoints: spec.Endpoints,
		Prefix:    spec.Prefix,
		ReadOnly:  readOnly,
		Logger:    cfg.Logger,
		Username:  cfg.Etcd.Username,
	}
	if e := cfg.Etcd; spec.TLS || e.CAFile != "" || e.CertFile != "" {
		opts.TLS = &etcdstore.TLS{CAFile: e.CAFile, CertFile: e.CertFile, KeyFile: e.KeyFile}
	}
	if cfg.Etcd.PasswordFile != "" {
		pw, err := readPasswordFile(cfg.Etcd.PasswordFile, cfg.Logger)
		if err != nil {
			return nil, err
		}
		opts.Password = pw
	}
	return etcdstore.Open(ctx, opts)
}

// openLeases returns the assigner role's lease manager for store: the one
// cfg.OpenLeases gives, else the embedded manager over a bbolt store or
// the etcd manager over an etcd store.
func openLeases(ctx context.Context, cfg Config, store storage.Store) (lease.Manager, error) {
	if cfg.OpenLeases != nil {
		return cfg.OpenLeases(store)
	}
	switch s := store.(type) {
	case *storage.Bolt:
		m, err := lease.NewEmbedded(ctx, s, lease.EmbeddedOptions{Logger: cfg.Logger.With("component", "lease")})
		if err != nil {
			return nil, fmt.Errorf("open the embedded lease manager: %w", err)
		}
		return m, nil
	case *etcdstore.Store:
		return etcdlease.New(s, etcdlease.Options{Logger: cfg.Logger.With("component", "lease")}), nil
	}
	return nil, fmt.Errorf("%w: the store (%T) has no lease manager; set Config.OpenLeases", ErrConfig, store)
}

// EtcdSecurity is how the agent reaches an etcd store over TLS and logs in
// to it, with the names etcdctl gives the same settings (--cacert, --cert,
// --key, --user). TLS is on when the store is etcds:// or CAFile or
// CertFile is set.
type EtcdSecurity struct {
	// CAFile holds the CA certificates etcd's server certificate must
	// chain to; "" uses the system's roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and key for etcd's
	// --client-cert-auth; both or neither.
	CertFile, KeyFile string
	// Username and PasswordFile log in to an etcd with authentication on;
	// both or neither. The file holds the password, so that it appears in
	// neither the process list nor the environment; it is read once, when
	// the store opens (at most maxPasswordFileBytes), and only slicerd's
	// user should be able to read it.
	Username, PasswordFile string
}

// validate checks the settings against the store they are for.
func (e EtcdSecurity) validate(store StoreSpec) error {
	if !store.Etcd {
		for _, f := range []struct{ flag, value string }{
			{"--etcd-ca", e.CAFile}, {"--etcd-cert", e.CertFile}, {"--etcd-key", e.KeyFile},
			{"--etcd-username", e.Username}, {"--etcd-password-file", e.PasswordFile},
		} {
			if f.value != "" {
				return fmt.Errorf("%w: %s is set but the store is not etcd; drop it, or give --store etcd://host:2379 (or etcds://)", ErrConfig, f.flag)
			}
		}
		return nil
	}
	switch {
	case e.CertFile != "" && e.KeyFile == "":
		return fmt.Errorf("%w: --etcd-cert %s has no key; give its key file in --etcd-key", ErrConfig, e.CertFile)
	case e.CertFile == "" && e.KeyFile != "":
		return fmt.Errorf("%w: --etcd-key %s has no certificate; give the certificate file in --etcd-cert", ErrConfig, e.KeyFile)
	case e.PasswordFile != "" && e.Username == "":
		return fmt.Errorf("%w: --etcd-password-file is set without a user; give the etcd user in --etcd-username", ErrConfig)
	case e.Username != "" && e.PasswordFile == "":
		return fmt.Errorf("%w: --etcd-username %q has no password; put it in a file and give --etcd-password-file, or drop the user and log in with a client certificate (--etcd-cert)", ErrConfig, e.Username)
	case strings.Contains(e.Username, ":"):
		return fmt.Errorf("%w: --etcd-username %q contains ':', which etcd does not allow in user names", ErrConfig, e.Username)
	}
	return nil
}

// maxPasswordFileBytes bounds the read of --etcd-password-file.
const maxPasswordFileBytes = 4 << 10

// readPasswordFile reads a password from its first line. A file that
// other users may read is used, with a warning.
func readPasswordFile(path string, log *slog.Logger) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%w: --etcd-password-file: %w", ErrConfig, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPasswordFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("%w: --etcd-password-file: %w", ErrConfig, err)
	}
	if len(b) > maxPasswordFileBytes {
		return "", fmt.Errorf("%w: --etcd-password-file %s is longer than %d bytes; put the password alone in it", ErrConfig, path, maxPasswordFileBytes)
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if pw == "" {
		return "", fmt.Errorf("%w: --etcd-password-file %s holds no password on its first line", ErrConfig, path)
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 && log != nil {
		log.Warn("other users may read the etcd password file; chmod 600 it", "file", path, "mode", fi.Mode().Perm().String())
	}
	return pw, nil
}
