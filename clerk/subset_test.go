package clerk_test

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/subset"
)

// servers starts n Distributors that all serve generation 1 and returns
// them sorted by address, the order subsetting indexes.
func servers(t *testing.T, n int) []*clerktest.Server {
	t.Helper()
	var out []*clerktest.Server
	for range n {
		s := newServer(t)
		s.Publish(clerktest.Uniform(job, 1, tasks, 4))
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *clerktest.Server) int {
		switch {
		case a.Addr() < b.Addr():
			return -1
		case a.Addr() > b.Addr():
			return 1
		}
		return 0
	})
	return out
}

func addrs(ss []*clerktest.Server) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Addr())
	}
	return out
}

// streamsOn reports the open streams of each server.
func streamsOn(ss []*clerktest.Server) []int {
	var out []int
	for _, s := range ss {
		out = append(out, s.OpenStreams())
	}
	return out
}

func onlyOn(ss []*clerktest.Server, i int) func() bool {
	return func() bool {
		for j, s := range ss {
			want := 0
			if j == i {
				want = 1
			}
			if s.OpenStreams() != want {
				return false
			}
		}
		return true
	}
}

// TestSubsetOrder checks that a Clerk streams from its subset in
// Rocksteadier's order, falls back to the other Distributors, and returns
// to its first choice once it is back.
func TestSubsetOrder(t *testing.T) {
	ss := servers(t, 6)
	frontend := uint64(13)
	pref := subset.Rocksteadier(frontend, len(ss), 2)
	// Shuffle the configured order: only the sorted order counts.
	cfgAddrs := addrs(ss)
	slices.Reverse(cfgAddrs)
	cfg := testConfig(cfgAddrs...)
	cfg.SubsetSize = 2
	cfg.Frontend = &frontend
	cfg.BackupRecheck = 100 * time.Millisecond
	c := start(t, cfg)
	waitGen(t, c, 1)
	testwait.For(t, "a stream on the first choice", onlyOn(ss, pref[0]))

	firstAddr := ss[pref[0]].Addr()
	ss[pref[0]].Close()
	testwait.For(t, "a stream on the second choice", onlyOn(ss, pref[1]))
	ss[pref[1]].Close()
	testwait.For(t, "a stream on another distributor", func() bool {
		n := 0
		for i, s := range ss {
			if i != pref[0] && i != pref[1] {
				n += s.OpenStreams()
			}
		}
		return n == 1
	})

	back, err := clerktest.NewServerAt(firstAddr)
	if err != nil {
		t.Skipf("cannot reuse port %s: %v", firstAddr, err)
	}
	t.Cleanup(back.Close)
	back.Publish(clerktest.Uniform(job, 2, tasks, 4))
	waitGen(t, c, 2)
	ss[pref[0]] = back
	testwait.For(t, "the stream back on the first choice", onlyOn(ss, pref[0]))
}

// TestSubsetClientsFollowTheirSubsets runs several numbered clients and
// checks that each streams from its own first choice.
func TestSubsetClientsFollowTheirSubsets(t *testing.T) {
	ss := servers(t, 5)
	want := make([]int, len(ss))
	var clerks []*clerk.Clerk
	for f := range uint64(10) {
		want[subset.Rocksteadier(f, len(ss), clerk.DefaultSubsetSize)[0]]++
		cfg := testConfig(addrs(ss)...)
		cfg.Frontend = &f
		clerks = append(clerks, start(t, cfg))
	}
	for _, c := range clerks {
		waitGen(t, c, 1)
	}
	testwait.For(t, "every client on its first choice", func() bool { return slices.Equal(streamsOn(ss), want) })
}

// TestSubsetSizeZeroUsesAll checks that without subsetting a Clerk still
// finds the one live Distributor among dead ones.
func TestSubsetSizeZeroUsesAll(t *testing.T) {
	srv := newServer(t)
	srv.Publish(clerktest.Uniform(job, 1, tasks, 4))
	cfg := testConfig(testnet.FreeAddr(t), testnet.FreeAddr(t), testnet.FreeAddr(t), testnet.FreeAddr(t), srv.Addr())
	cfg.SubsetSize = 0
	c := start(t, cfg)
	waitGen(t, c, 1)
	testwait.For(t, "a stream", func() bool { return srv.OpenStreams() == 1 })
}

func TestSubsetSizeValidated(t *testing.T) {
	cfg := testConfig("127.0.0.1:1")
	cfg.SubsetSize = -1
	if _, err := clerk.New(cfg); !errors.Is(err, clerk.ErrInvalidConfig) {
		t.Fatalf("New with a negative subset size = %v, want ErrInvalidConfig", err)
	}
	cfg.SubsetSize, cfg.ID = 3, "web-frontend-7"
	if _, err := clerk.New(cfg); err != nil {
		t.Fatalf("New with an ID: %v", err)
	}
}

// TestSubsetMovesWhenServersChange starts a Clerk that knows one
// Distributor, then tells it about all of them: the open stream moves to
// the client's first choice without waiting for a recheck.
func TestSubsetMovesWhenServersChange(t *testing.T) {
	ss := servers(t, 5)
	frontend := uint64(3)
	first := subset.Rocksteadier(frontend, len(ss), 3)[0]
	other := (first + 1) % len(ss)
	var known atomic.Pointer[[]string]
	one := []string{ss[other].Addr()}
	known.Store(&one)
	cfg := testConfig()
	cfg.Resolver = func() ([]string, []string) { return *known.Load(), nil }
	cfg.Frontend = &frontend
	cfg.BackupRecheck = time.Hour // only the change can move the stream
	c := start(t, cfg)
	waitGen(t, c, 1)
	testwait.For(t, "a stream on the only known distributor", onlyOn(ss, other))

	all := addrs(ss)
	known.Store(&all)
	c.ResolveNow()
	testwait.For(t, "the stream moved to the first choice", onlyOn(ss, first))
}
