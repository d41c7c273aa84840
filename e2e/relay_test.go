package e2e

import (
	"testing"
	"time"

	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/internal/testwait"
)

// A relay Distributor process (--role distributor --distributor-upstream)
// between slicerd and a Clerk that knows only the relay: the Clerk follows
// the job through it as tasks join, and the relay streams it from its
// upstream, not from the Assigner. In the secure pass the relay presents
// its node certificate to the upstream and accepts only a Distributor's.
func TestRelayDistributorBinary(t *testing.T) {
	root := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	relay := startSlicerd(t, "relay-1", "--role", "distributor", "--distributor-upstream", root.rpcAddr,
		"--join", root.gossipAddr, "--log-level", "debug")
	startKV(t, "kv-0", root.gossipAddr)
	cl := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{relay.rpcAddr}})
	serves := func(tasks ...string) func() bool {
		return func() bool {
			a := cl.Assignment()
			if a == nil {
				return false
			}
			for _, task := range tasks {
				if _, ok := a.TaskIndex(task); !ok {
					return false
				}
			}
			return true
		}
	}
	testwait.Until(t, 30*time.Second, "the assignment through the relay", serves("kv-0"))
	startKV(t, "kv-1", root.gossipAddr)
	testwait.Until(t, 30*time.Second, "the assignment with kv-1 through the relay", serves("kv-0", "kv-1"))
	relay.waitLine(10*time.Second, `"msg":"assignment received"`, `"from":"`+root.rpcAddr+`"`)
	if !secure {
		return
	}
	// An "upstream" that is a task, not a Distributor: its certificate is
	// refused, and the relay pulls from the Assigner instead.
	kv := startKV(t, "kv-2", root.gossipAddr)
	impostor := startSlicerd(t, "relay-2", "--role", "distributor", "--distributor-upstream", kv.addr,
		"--join", root.gossipAddr, "--log-level", "debug")
	cl2 := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{impostor.rpcAddr}})
	testwait.Until(t, 30*time.Second, "the assignment through the second relay", func() bool { return cl2.Assignment() != nil })
	impostor.waitLine(10*time.Second, `"msg":"assignment stream from upstream distributor ended`, "certificate")
	impostor.waitLine(10*time.Second, `"msg":"assignment received"`, `"from":"node-1"`)
}
