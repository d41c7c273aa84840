package etcdlease_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/lease/etcdlease"
	"github.com/slicerd/slicerd/lease/leasetest"
	"github.com/slicerd/slicerd/storage/etcdstore"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

func openStore(t *testing.T, endpoint, prefix string) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.Open(context.Background(), etcdstore.Options{Endpoints: []string{endpoint}, Prefix: prefix})
	if err != nil {
		t.Fatalf("etcdstore.Open: %v", err)
	}
	return s
}

// TestContract holds the etcd manager, with the etcd store whose fenced
// commits check its job leases, to the contract every lease manager keeps,
// against a real etcd server.
func TestContract(t *testing.T) {
	srv := etcdtest.Start(t)
	var prefixes atomic.Int64
	open := func(t *testing.T, prefix string) leasetest.Pair {
		s := openStore(t, srv.Endpoint(), prefix)
		return leasetest.Pair{M: etcdlease.New(s, etcdlease.Options{}), S: s}
	}
	leasetest.Run(t, leasetest.Opener{
		Open: func(t *testing.T) leasetest.Pair {
			return open(t, fmt.Sprintf("/lease-contract-%d/", prefixes.Add(1)))
		},
		// Another process's manager: its own client on the same prefix.
		Peer: func(t *testing.T, p leasetest.Pair) lease.Manager {
			s := openStore(t, srv.Endpoint(), p.S.(*etcdstore.Store).Prefix())
			t.Cleanup(func() { s.Close() })
			return etcdlease.New(s, etcdlease.Options{})
		},
		Reopen: func(t *testing.T, p leasetest.Pair) leasetest.Pair {
			prefix := p.S.(*etcdstore.Store).Prefix()
			p.M.Close()
			p.S.Close()
			return open(t, prefix)
		},
		// etcd grants whole seconds, and at least 1.5 election timeouts
		// (2 s with etcd's defaults).
		TTL: 2 * time.Second,
	})
}
