package roles

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

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
}

const etcdScheme = "etcd://"

// storeExample ends every store spec error.
const storeExample = `use "bolt" (the default: a file in --data-dir) or etcd://host:2379[,host2:2379][/prefix]`

// ParseStore parses a store spec: "" or "bolt" for the bbolt file in the
// data directory, or etcd://host:port[,host:port...][/prefix] for etcd.
func ParseStore(spec string) (StoreSpec, error) {
	if spec == "" || spec == "bolt" {
		return StoreSpec{}, nil
	}
	rest, ok := strings.CutPrefix(spec, etcdScheme)
	if !ok {
		scheme, _, found := strings.Cut(spec, "://")
		if found {
			return StoreSpec{}, fmt.Errorf("%w: store %q has scheme %q, which slicerd does not know; %s", ErrConfig, spec, scheme, storeExample)
		}
		return StoreSpec{}, fmt.Errorf("%w: store %q is neither bolt nor an etcd:// address; %s", ErrConfig, spec, storeExample)
	}
	hosts, path, hasPath := strings.Cut(rest, "/")
	s := StoreSpec{Etcd: true}
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
	return etcdstore.Open(ctx, etcdstore.Options{
		Endpoints: spec.Endpoints,
		Prefix:    spec.Prefix,
		ReadOnly:  readOnly,
		Logger:    cfg.Logger,
	})
}
