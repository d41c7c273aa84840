package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testlog"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/roles"
)

// A task given the cluster's gossip key joins an encrypted slicerd and is
// assigned slices.
func TestJoinsEncryptedCluster(t *testing.T) {
	key := bytes.Repeat([]byte{9}, 32)
	cfg := roles.TestConfig("slicerd-0")
	cfg.DataDir = t.TempDir()
	cfg.Gossip.Keys = [][]byte{key}
	cfg.Logger = slog.New(slog.DiscardHandler)
	agent, err := roles.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Run(actx) }()
	defer func() {
		stopAgent()
		if err := <-agentDone; err != nil {
			t.Errorf("slicerd agent: %v", err)
		}
	}()
	testwait.For(t, "slicerd's gossip to start", func() bool { return agent.GossipAddr() != "" })

	var out, errOut testlog.Buffer
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-job", "kv", "-task", "kv-0", "-gossip-profile", "local", "-join", agent.GossipAddr(),
			"-gossip-key", gossip.EncodeKey(key)}, &out, &errOut)
	}()
	client := slicerv1connect.NewDistributorServiceClient(api.NewH2CClient(), api.RPCURL(agent.RPCAddr()))
	testwait.For(t, "kv-0 to own slices", func() bool {
		resp, err := client.GetAssignment(context.Background(), connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "kv"}))
		if err != nil {
			return false
		}
		for _, s := range resp.Msg.GetAssignment().GetSlices() {
			if len(s.GetTasks()) == 1 && s.GetTasks()[0] == "kv-0" {
				return true
			}
		}
		return false
	})
	stop()
	if code := <-done; code != 0 {
		t.Errorf("kvserver exited %d; stderr:\n%s", code, errOut.String())
	}
}

func TestRejectsBadGossipKey(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"-gossip-key", "c2hvcnQ="}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "invalid -gossip-key") {
		t.Fatalf("exit %d, stderr %q; want 2 and invalid -gossip-key", code, errOut.String())
	}
}
