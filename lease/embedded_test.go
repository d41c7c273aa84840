package lease_test

import (
	"testing"
	"time"

	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/lease/leasetest"
	"github.com/slicerd/slicerd/storage"
)

// shortTTL is the expiry tests' lease lifetime for the embedded manager.
const shortTTL = 300 * time.Millisecond

func openEmbedded(t *testing.T, path string) leasetest.Pair {
	t.Helper()
	b, err := storage.OpenBolt(path, storage.BoltOptions{})
	if err != nil {
		t.Fatalf("OpenBolt: %v", err)
	}
	m, err := lease.NewEmbedded(t.Context(), b, lease.EmbeddedOptions{MaxReadTTL: 2 * shortTTL})
	if err != nil {
		b.Close()
		t.Fatalf("NewEmbedded: %v", err)
	}
	return leasetest.Pair{M: m, S: b}
}

// TestEmbeddedContract holds the embedded manager, with the bbolt store it
// persists into, to the contract every lease manager keeps.
func TestEmbeddedContract(t *testing.T) {
	leasetest.Run(t, leasetest.Opener{
		Open: func(t *testing.T) leasetest.Pair {
			return openEmbedded(t, t.TempDir()+"/"+storage.DataFileName)
		},
		Reopen: func(t *testing.T, p leasetest.Pair) leasetest.Pair {
			path := p.S.(*storage.Bolt).Path()
			p.M.Close()
			if err := p.S.Close(); err != nil {
				t.Fatal(err)
			}
			return openEmbedded(t, path)
		},
		TTL: shortTTL,
	})
}
