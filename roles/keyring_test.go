package roles

import (
	"context"
	"crypto/rand"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/slicelet"
)

func gossipKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func seesAlive(r *running, names ...string) func() bool {
	return func() bool {
		alive := map[string]bool{}
		for _, p := range r.Peers() {
			alive[p.Name] = p.Status == gossip.StatusAlive
		}
		for _, n := range names {
			if !alive[n] {
				return false
			}
		}
		return true
	}
}

// Three agents and a task rotate the gossip key through KeyringService
// while the task stays a member and keeps its slices: the agents share
// each change over their API, and the task takes it from its preferred
// Assigner. An agent restarted afterwards with its original key rejoins
// through its keyring file.
func TestKeyringRotationAcrossAgentsAndTask(t *testing.T) {
	k1, k2 := gossipKey(t), gossipKey(t)
	e1, e2 := gossip.EncodeKey(k1), gossip.EncodeKey(k2)
	var agents []*running
	var cfgs []Config
	for i, name := range []string{"agent-1", "agent-2", "agent-3"} {
		dir := t.TempDir()
		cfg := testConfig(t, name, dir, gossip.RoleDistributor)
		if i == 0 {
			cfg = testConfig(t, name, dir)
		} else {
			cfg.Gossip.Join = []string{agents[0].GossipAddr()}
		}
		cfg.Gossip.Keys = [][]byte{k1}
		cfg.Gossip.KeyringFile = filepath.Join(dir, "gossip-keyring.json")
		cfgs = append(cfgs, cfg)
		agents = append(agents, startAgent(t, cfg))
	}
	taskFile := filepath.Join(t.TempDir(), "task-keyring.json")
	runSlicelet(t, agents[0], slicelet.Config{Job: "kv", Task: "t0", LoadWindow: 100 * time.Millisecond,
		Gossip: gossip.Config{Keys: [][]byte{k1}, KeyringFile: taskFile}})
	members := []string{"agent-1", "agent-2", "agent-3", gossip.TaskMemberName("kv", "t0")}
	for _, a := range agents {
		testwait.For(t, "every member alive", seesAlive(a, members...))
	}
	watchJob(t, agents[1].RPCAddr(), "kv", false).until(t, "t0 assigned", hasTasks("t0"))

	client := slicerv1connect.NewKeyringServiceClient(api.NewH2CClient(), api.RPCURL(agents[1].RPCAddr()))
	ctx := context.Background()
	list := func() *slicerv1.ListKeysResponse {
		t.Helper()
		resp, err := client.ListKeys(ctx, connect.NewRequest(&slicerv1.ListKeysRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg
	}
	// shows waits until every member lists keys, with primary first.
	shows := func(step string, primary string, keys ...string) {
		t.Helper()
		var got *slicerv1.ListKeysResponse
		testwait.For(t, "ListKeys to show "+step+" on every member", func() bool {
			got = list()
			if got.GetResult().GetNumNodes() != 4 || got.GetResult().GetNumResponses() != 4 || got.GetPrimaryKeys()[primary] != 4 || len(got.GetKeys()) != len(keys) {
				return false
			}
			for _, k := range keys {
				if got.GetKeys()[k] != 4 {
					return false
				}
			}
			return true
		})
	}
	shows("the first key", e1, e1)
	check := func(step string, res *slicerv1.KeyringResult, err error) {
		t.Helper()
		if err != nil || res.GetNumNodes() != 3 || res.GetNumResponses() != 3 || res.GetNumErrors() != 0 || res.GetError() != "" || res.GetNumTasksPending() != 1 {
			t.Fatalf("%s = %v, %v; want 3 agents answering without errors, 1 task to follow", step, res, err)
		}
		for _, a := range agents {
			testwait.For(t, "every member alive after "+step, seesAlive(a, members...))
		}
	}
	ir, err := client.InstallKey(ctx, connect.NewRequest(&slicerv1.InstallKeyRequest{Key: e2}))
	check("install", ir.Msg.GetResult(), err)
	shows("install", e1, e1, e2)
	ur, err := client.UseKey(ctx, connect.NewRequest(&slicerv1.UseKeyRequest{Key: e2}))
	check("use", ur.Msg.GetResult(), err)
	shows("use", e2, e1, e2)
	rr, err := client.RemoveKey(ctx, connect.NewRequest(&slicerv1.RemoveKeyRequest{Key: e1}))
	check("remove", rr.Msg.GetResult(), err)
	shows("remove", e2, e2)
	for name, f := range map[string]string{"agent-3": cfgs[2].Gossip.KeyringFile, "t0": taskFile} {
		if keys, err := gossip.ReadKeyringFile(f); err != nil || len(keys) != 1 || gossip.EncodeKey(keys[0]) != e2 {
			t.Fatalf("%s's keyring file = %v, %v; want the new key only", name, keys, err)
		}
	}
	for _, a := range agents {
		testwait.For(t, "every member alive after the rotation", seesAlive(a, members...))
	}

	// Removing the primary key is refused by the agent asked, which says so.
	_, err = client.RemoveKey(ctx, connect.NewRequest(&slicerv1.RemoveKeyRequest{Key: e2}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "primary") {
		t.Fatalf("removing the primary key = %v; want FAILED_PRECONDITION saying it is the primary key", err)
	}
	// A malformed key is the caller's mistake.
	if _, err := client.InstallKey(ctx, connect.NewRequest(&slicerv1.InstallKeyRequest{Key: "short"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("installing a malformed key = %v, want INVALID_ARGUMENT", err)
	}

	// agent-3 restarts still configured with the old key; its keyring
	// file holds the new one, and it rejoins.
	agents[2].stop(t)
	testwait.For(t, "agent-3 left", func() bool {
		for _, p := range agents[0].Peers() {
			if p.Name == "agent-3" {
				return p.Status == gossip.StatusLeft
			}
		}
		return false
	})
	restarted := startAgent(t, cfgs[2])
	testwait.For(t, "agent-3 back", seesAlive(agents[0], members...))
	testwait.For(t, "restarted agent-3 sees everyone", seesAlive(restarted, members...))
	watchJob(t, restarted.RPCAddr(), "kv", false).until(t, "t0 assigned through agent-3", hasTasks("t0"))
}

func TestKeyringServiceWithoutEncryption(t *testing.T) {
	node := startAgent(t, testConfig(t, "plain", t.TempDir()))
	client := slicerv1connect.NewKeyringServiceClient(api.NewH2CClient(), api.RPCURL(node.RPCAddr()))
	_, err := client.ListKeys(context.Background(), connect.NewRequest(&slicerv1.ListKeysRequest{}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("ListKeys on an unencrypted cluster = %v, want FAILED_PRECONDITION", err)
	}
}
