package inprocess

import (
	"context"
	"testing"

	"github.com/slicerd/slicerd/internal/clustertest"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/etcdstore"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

// storeOptions runs the cluster on an embedded etcd: every agent has its
// own etcd client, as separate processes would, and the harness reads
// through one more.
func storeOptions(t *testing.T) clustertest.Options {
	t.Helper()
	srv := etcdtest.Start(t)
	open := func() (storage.Store, error) {
		return etcdstore.Open(context.Background(), etcdstore.Options{Endpoints: []string{srv.Endpoint()}})
	}
	reader, err := open()
	if err != nil {
		t.Fatal(err)
	}
	return clustertest.Options{
		Store:     reader,
		OpenStore: func(string) (storage.Store, error) { return open() },
	}
}
