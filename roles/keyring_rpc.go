package roles

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/roles/rpc"
)

// keyringService serves KeyringService on every agent, whatever its roles.
// A keyring change is carried out here, then shared with every other live
// agent over the agents' authenticated API (ShareKeyChange); tasks take
// the keyring from their preferred Assigner's answer to their next
// registration. Gossip carries no keyring change: serf's keyring queries
// find no keyring (see gossip's sealed transport).
//
// Who may call it: admin only for ListKeys, InstallKey, UseKey and
// RemoveKey (a key list tells an attacker which key to steal, and the
// changes can cut members off); ShareKeyChange, an agent only. Cost per
// admin call: one ShareKeyChange to each live agent, all at once, each
// bounded by shareKeyTimeout.
type keyringService struct {
	agent *Agent
	peers *rpc.Peers
}

func newKeyringService(a *Agent) *keyringService {
	return &keyringService{agent: a, peers: rpc.NewPeers(a.cfg.TLS)}
}

// shareKeyTimeout bounds one ShareKeyChange call.
const shareKeyTimeout = 5 * time.Second

// taskKeyRefresh is when tasks take a change at the latest: the Slicelet
// registers with every Assigner every 30 s.
const taskKeyRefresh = 30 * time.Second

// errNoGossip reports a keyring call before the agent started gossip.
var errNoGossip = errors.New("gossip has not started on this node yet; retry in a moment")

// keyringCodes maps the gossip package's keyring errors to Connect codes.
var keyringCodes = []struct {
	err  error
	code connect.Code
}{
	{gossip.ErrConfig, connect.CodeInvalidArgument},
	{gossip.ErrKeyring, connect.CodeFailedPrecondition},
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

// apply carries op out on this agent's gossip node and returns its keys
// afterwards, base64, primary first.
func (k *keyringService) apply(op slicerv1.KeyOp, key []byte) ([]string, error) {
	node := k.agent.gossipNode()
	if node == nil {
		return nil, fmt.Errorf("keyring: %w", errNoGossip)
	}
	if !node.Encrypted() {
		return nil, fmt.Errorf("%w: gossip encryption is off on %s; start every member with --gossip-key to use a keyring", gossip.ErrNotEncrypted, k.agent.cfg.NodeName)
	}
	var err error
	switch op {
	case slicerv1.KeyOp_KEY_OP_LIST:
	case slicerv1.KeyOp_KEY_OP_INSTALL:
		err = node.InstallKey(key)
	case slicerv1.KeyOp_KEY_OP_USE:
		err = node.UseKey(key)
	case slicerv1.KeyOp_KEY_OP_REMOVE:
		err = node.RemoveKey(key)
	default:
		return nil, fmt.Errorf("%w: unknown keyring operation %v", gossip.ErrConfig, op)
	}
	keys := node.LocalKeys()
	out := make([]string, len(keys))
	for i, key := range keys {
		out[i] = gossip.EncodeKey(key)
	}
	return out, err
}

// keyOf decodes the key of a change; a listing has none.
func keyOf(op slicerv1.KeyOp, encoded string) ([]byte, error) {
	if op == slicerv1.KeyOp_KEY_OP_LIST {
		return nil, nil
	}
	key, err := gossip.ParseKey(encoded)
	if err != nil {
		return nil, keyringError(err)
	}
	return key, nil
}

// agentAnswer is one agent's answer to a shared operation.
type agentAnswer struct {
	keys  []string
	tasks []*slicerv1.TaskKeys
	err   string
}

// run carries op out here and on every other live agent, and gathers the
// answers by agent name. Only this agent's own failure is an RPC error.
func (k *keyringService) run(ctx context.Context, op slicerv1.KeyOp, encoded string) (map[string]agentAnswer, error) {
	key, err := keyOf(op, encoded)
	if err != nil {
		return nil, err
	}
	keys, err := k.apply(op, key)
	if err != nil {
		return nil, keyringError(err)
	}
	self := k.agent.cfg.NodeName
	answers := map[string]agentAnswer{self: {keys: keys, tasks: k.agent.taskKeys()}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range k.agent.Peers() {
		if p.Name == self || p.Status != gossip.StatusAlive || p.RPCAddr == "" || p.Has(gossip.RoleTask) || len(p.Roles) == 0 {
			continue
		}
		wg.Go(func() {
			hc, base := k.peers.Get(identity.Role(p.Roles[0]), p.Name, p.RPCAddr)
			cctx, cancel := context.WithTimeout(ctx, shareKeyTimeout)
			defer cancel()
			resp, err := slicerv1connect.NewKeyringServiceClient(hc, base).ShareKeyChange(cctx, connect.NewRequest(&slicerv1.ShareKeyChangeRequest{Op: op, Key: encoded}))
			a := agentAnswer{}
			switch {
			case err != nil:
				a.err = err.Error()
			default:
				a = agentAnswer{keys: resp.Msg.GetKeys(), tasks: resp.Msg.GetTasks(), err: resp.Msg.GetError()}
			}
			mu.Lock()
			answers[p.Name] = a
			mu.Unlock()
		})
	}
	wg.Wait()
	return answers, nil
}

// ShareKeyChange implements KeyringService: another agent shares a
// keyring operation an admin asked it for. A failure goes back in the
// answer, so the asking agent reports it per member.
func (k *keyringService) ShareKeyChange(_ context.Context, req *connect.Request[slicerv1.ShareKeyChangeRequest]) (*connect.Response[slicerv1.ShareKeyChangeResponse], error) {
	op := req.Msg.GetOp()
	key, err := keyOf(op, req.Msg.GetKey())
	if err != nil {
		return nil, err
	}
	keys, err := k.apply(op, key)
	out := &slicerv1.ShareKeyChangeResponse{Keys: keys}
	if err != nil {
		out.Error = err.Error()
	}
	if op == slicerv1.KeyOp_KEY_OP_LIST {
		out.Tasks = k.agent.taskKeys()
	}
	if op != slicerv1.KeyOp_KEY_OP_LIST && err == nil {
		k.agent.log.Info("gossip keyring changed by another agent", "op", op.String())
	}
	return connect.NewResponse(out), nil
}

// taskKeys returns what the tasks registered with this agent's Assigner
// said of their keys.
func (a *Agent) taskKeys() []*slicerv1.TaskKeys {
	if a.assigner == nil {
		return nil
	}
	return a.assigner.TaskKeys()
}

// result summarises the agents' answers to a change.
func (k *keyringService) result(answers map[string]agentAnswer) *slicerv1.KeyringResult {
	r := &slicerv1.KeyringResult{Messages: map[string]string{}}
	for name, a := range answers {
		r.NumNodes++
		r.NumResponses++
		if a.err != "" {
			r.NumErrors++
			r.Messages[name] = a.err
		}
	}
	for _, p := range k.agent.rawPeers() {
		if p.Has(gossip.RoleTask) && p.Status == gossip.StatusAlive {
			r.NumTasksPending++
		}
	}
	if r.NumErrors > 0 {
		r.Error = fmt.Sprintf("%d/%d agents reported failure", r.NumErrors, r.NumNodes)
	}
	return r
}

// change runs a keyring change and logs it.
func (k *keyringService) change(ctx context.Context, op slicerv1.KeyOp, key string) (*slicerv1.KeyringResult, error) {
	answers, err := k.run(ctx, op, key)
	if err != nil {
		return nil, err
	}
	r := k.result(answers)
	k.agent.log.Info("gossip keyring changed cluster-wide", "op", op.String(), "agents", r.NumNodes, "errors", r.NumErrors,
		"tasks_within", taskKeyRefresh, "tasks", r.NumTasksPending)
	return r, nil
}

// ListKeys implements KeyringService: every live agent's keys, and every
// live task's as its last registration with an Assigner reported them.
func (k *keyringService) ListKeys(ctx context.Context, _ *connect.Request[slicerv1.ListKeysRequest]) (*connect.Response[slicerv1.ListKeysResponse], error) {
	answers, err := k.run(ctx, slicerv1.KeyOp_KEY_OP_LIST, "")
	if err != nil {
		return nil, err
	}
	r := &slicerv1.KeyringResult{Messages: map[string]string{}}
	keys, primary := map[string]int32{}, map[string]int32{}
	byID := map[string]string{} // key ID → base64 key, from the agents' keys
	count := func(list []string) {
		for i, key := range list {
			keys[key]++
			if i == 0 {
				primary[key]++
			}
		}
	}
	for name, a := range answers {
		r.NumNodes++
		if a.err != "" {
			r.NumErrors++
			r.Messages[name] = a.err
			continue
		}
		r.NumResponses++
		count(a.keys)
		for _, key := range a.keys {
			if raw, err := gossip.ParseKey(key); err == nil {
				byID[gossip.KeyID(raw)] = key
			}
		}
	}
	// The newest report of each live task, from whichever Assigner has it.
	newest := map[string]*slicerv1.TaskKeys{}
	for _, a := range answers {
		for _, t := range a.tasks {
			if cur, ok := newest[t.GetMember()]; !ok || t.GetReportedUnixMs() > cur.GetReportedUnixMs() {
				newest[t.GetMember()] = t
			}
		}
	}
	// Every live member that says it is a task counts, registered or not:
	// one that never registers (no certificate) shows as not reporting.
	for _, p := range k.agent.rawPeers() {
		if !p.Has(gossip.RoleTask) || p.Status != gossip.StatusAlive {
			continue
		}
		r.NumNodes++
		t, ok := newest[p.Name]
		if !ok || len(t.GetKeyIds()) == 0 {
			r.Messages[p.Name] = "has not reported its keys to an Assigner in the last two minutes (no registration, or a Slicelet without keyring reports)"
			continue
		}
		r.NumResponses++
		list := make([]string, 0, len(t.GetKeyIds()))
		for _, id := range t.GetKeyIds() {
			key, known := byID[id]
			if !known {
				key = "unknown key " + id
			}
			list = append(list, key)
		}
		count(list)
	}
	if r.NumResponses < r.NumNodes {
		r.Error = fmt.Sprintf("%d of %d members answered", r.NumResponses, r.NumNodes)
	}
	return connect.NewResponse(&slicerv1.ListKeysResponse{Result: r, Keys: keys, PrimaryKeys: primary}), nil
}

// InstallKey implements KeyringService.
func (k *keyringService) InstallKey(ctx context.Context, req *connect.Request[slicerv1.InstallKeyRequest]) (*connect.Response[slicerv1.InstallKeyResponse], error) {
	r, err := k.change(ctx, slicerv1.KeyOp_KEY_OP_INSTALL, req.Msg.GetKey())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&slicerv1.InstallKeyResponse{Result: r}), nil
}

// UseKey implements KeyringService.
func (k *keyringService) UseKey(ctx context.Context, req *connect.Request[slicerv1.UseKeyRequest]) (*connect.Response[slicerv1.UseKeyResponse], error) {
	r, err := k.change(ctx, slicerv1.KeyOp_KEY_OP_USE, req.Msg.GetKey())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&slicerv1.UseKeyResponse{Result: r}), nil
}

// RemoveKey implements KeyringService.
func (k *keyringService) RemoveKey(ctx context.Context, req *connect.Request[slicerv1.RemoveKeyRequest]) (*connect.Response[slicerv1.RemoveKeyResponse], error) {
	r, err := k.change(ctx, slicerv1.KeyOp_KEY_OP_REMOVE, req.Msg.GetKey())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&slicerv1.RemoveKeyResponse{Result: r}), nil
}
