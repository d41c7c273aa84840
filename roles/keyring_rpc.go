package roles

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/roles/rpc"
)

// keyringService serves KeyringService on every agent, whatever its roles:
// it runs serf's key manager on the agent's gossip node, which asks every
// member over one serf query. Who may call it: admin only (ListKeys,
// InstallKey, UseKey and RemoveKey alike; a key list tells an attacker
// which key to steal, and the writes can cut members off). Cost per call:
// one serf query, waiting at most the query timeout for the answers, asked
// again up to twice when some member did not answer.
type keyringService struct {
	agent *Agent
}

// errNoGossip reports a keyring call before the agent started gossip.
var errNoGossip = errors.New("gossip has not started on this node yet; retry in a moment")

// keyringCodes maps the gossip package's keyring errors to Connect codes.
var keyringCodes = []struct {
	err  error
	code connect.Code
}{
	{gossip.ErrConfig, connect.CodeInvalidArgument},
	{gossip.ErrNotEncrypted, connect.CodeFailedPrecondition},
	{gossip.ErrClosed, connect.CodeUnavailable},
	{errNoGossip, connect.CodeUnavailable},
}

func keyringError(err error) error {
	for _, c := range keyringCodes {
		if errors.Is(err, c.err) {
			return connect.NewError(c.code, err)
		}
	}
	return rpc.ToConnect(err)
}

// run calls op on the gossip node. An operation that not every member
// carried out is not an RPC error: its per-member results go back with the
// summary in KeyringResult.error, so the operator sees who failed.
func (k *keyringService) run(op func(*gossip.Node) (gossip.KeyResult, error)) (gossip.KeyResult, *slicerv1.KeyringResult, error) {
	node := k.agent.gossipNode()
	if node == nil {
		return gossip.KeyResult{}, nil, keyringError(fmt.Errorf("keyring: %w", errNoGossip))
	}
	res, err := op(node)
	incomplete := errors.Is(err, gossip.ErrKeyring) && !errors.Is(err, gossip.ErrConfig)
	if err != nil && !incomplete {
		return res, nil, keyringError(err)
	}
	out := &slicerv1.KeyringResult{
		NumNodes:     int32(res.NumNodes),
		NumResponses: int32(res.NumResp),
		NumErrors:    int32(res.NumErr),
		Messages:     maps.Clone(res.Messages),
	}
	if err != nil {
		out.Error = err.Error()
	}
	return res, out, nil
}

func counts(m map[string]int) map[string]int32 {
	out := make(map[string]int32, len(m))
	for k, v := range m {
		out[k] = int32(v)
	}
	return out
}

// ListKeys implements KeyringService.
func (k *keyringService) ListKeys(_ context.Context, _ *connect.Request[slicerv1.ListKeysRequest]) (*connect.Response[slicerv1.ListKeysResponse], error) {
	res, out, err := k.run((*gossip.Node).ListKeys)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&slicerv1.ListKeysResponse{Result: out, Keys: counts(res.Keys), PrimaryKeys: counts(res.PrimaryKeys)}), nil
}

// InstallKey implements KeyringService.
func (k *keyringService) InstallKey(_ context.Context, req *connect.Request[slicerv1.InstallKeyRequest]) (*connect.Response[slicerv1.InstallKeyResponse], error) {
	_, out, err := k.run(func(n *gossip.Node) (gossip.KeyResult, error) { return n.InstallKey(req.Msg.GetKey()) })
	if err != nil {
		return nil, err
	}
	k.agent.log.Info("gossip key installed cluster-wide", "nodes", out.NumNodes, "errors", out.NumErrors)
	return connect.NewResponse(&slicerv1.InstallKeyResponse{Result: out}), nil
}

// UseKey implements KeyringService.
func (k *keyringService) UseKey(_ context.Context, req *connect.Request[slicerv1.UseKeyRequest]) (*connect.Response[slicerv1.UseKeyResponse], error) {
	_, out, err := k.run(func(n *gossip.Node) (gossip.KeyResult, error) { return n.UseKey(req.Msg.GetKey()) })
	if err != nil {
		return nil, err
	}
	k.agent.log.Info("gossip primary key changed cluster-wide", "nodes", out.NumNodes, "errors", out.NumErrors)
	return connect.NewResponse(&slicerv1.UseKeyResponse{Result: out}), nil
}

// RemoveKey implements KeyringService.
func (k *keyringService) RemoveKey(_ context.Context, req *connect.Request[slicerv1.RemoveKeyRequest]) (*connect.Response[slicerv1.RemoveKeyResponse], error) {
	_, out, err := k.run(func(n *gossip.Node) (gossip.KeyResult, error) { return n.RemoveKey(req.Msg.GetKey()) })
	if err != nil {
		return nil, err
	}
	k.agent.log.Info("gossip key removed cluster-wide", "nodes", out.NumNodes, "errors", out.NumErrors)
	return connect.NewResponse(&slicerv1.RemoveKeyResponse{Result: out}), nil
}
