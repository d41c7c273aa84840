package grpcroute

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/balancer/pickfirst"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/serviceconfig"
	"google.golang.org/grpc/status"

	"github.com/slicerd/slicerd/clerk"
)

// PolicyName is the load-balancing policy the slicer resolver selects for
// its channels. It can also be named in a channel's own service config:
//
//	{"loadBalancingConfig": [{"slicer_key_routing": {"keyHeaderName": "x-user"}}]}
//
// A channel that uses it without the slicer resolver has no assignment,
// and every call goes to a random ready endpoint.
const PolicyName = "slicer_key_routing"

func init() { balancer.Register(policyBuilder{}) }

// lbConfig is the policy's configuration in the service config.
type lbConfig struct {
	serviceconfig.LoadBalancingConfig `json:"-"`

	// KeyHeaderName is the request header a call's key is read from when
	// its context has none.
	KeyHeaderName string `json:"keyHeaderName,omitempty"`
}

// tableKey is the resolver.State attribute that carries the *clerk.Table of
// the assignment the endpoints came from.
type tableKey struct{}

func withTable(a *attributes.Attributes, t *clerk.Table) *attributes.Attributes {
	return a.WithValue(tableKey{}, t)
}

func tableOf(a *attributes.Attributes) *clerk.Table {
	t, _ := a.Value(tableKey{}).(*clerk.Table)
	return t
}

type policyBuilder struct{}

func (policyBuilder) Name() string { return PolicyName }

func (policyBuilder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	cfg := &lbConfig{KeyHeaderName: DefaultKeyHeader}
	if err := json.Unmarshal(js, cfg); err != nil {
		return nil, fmt.Errorf("grpcroute: %s config %s: %w", PolicyName, js, err)
	}
	h, err := checkHeader(cfg.KeyHeaderName)
	if err != nil {
		return nil, err
	}
	cfg.KeyHeaderName = h
	return cfg, nil
}

// checkHeader returns name lower-cased (gRPC metadata keys are), or an
// error if it cannot be a request header's name.
func checkHeader(name string) (string, error) {
	if name == "" {
		return "", errors.New("grpcroute: the key header name is empty")
	}
	h := strings.ToLower(name)
	for _, c := range []byte(h) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", fmt.Errorf("grpcroute: key header name %q: gRPC header names hold only letters, digits, '-', '_' and '.'", name)
		}
	}
	if strings.HasPrefix(h, "grpc-") || h[0] == ':' {
		return "", fmt.Errorf("grpcroute: key header name %q is reserved by gRPC", name)
	}
	return h, nil
}

func (policyBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := &routingBalancer{ClientConn: cc}
	b.child = endpointsharding.NewBalancer(b, opts, balancer.Get(pickfirst.Name).Build, endpointsharding.Options{})
	return b
}

// routingBalancer keeps a pick_first child per task through
// endpointsharding and replaces endpointsharding's round-robin picker with
// one that picks by key. It embeds the channel's ClientConn to intercept
// the child's UpdateState.
type routingBalancer struct {
	balancer.ClientConn
	child balancer.Balancer

	mu      sync.Mutex
	inhibit bool // inside UpdateClientConnState: one picker at the end
	header  string
	table   *clerk.Table
	groups  *sliceGroups // of table
	state   balancer.State
	hasKids bool
}

func (b *routingBalancer) UpdateClientConnState(ccs balancer.ClientConnState) error {
	cfg, ok := ccs.BalancerConfig.(*lbConfig)
	if !ok {
		return fmt.Errorf("grpcroute: unexpected balancer config of type %T", ccs.BalancerConfig)
	}
	t := tableOf(ccs.ResolverState.Attributes)
	b.mu.Lock()
	b.inhibit = true
	b.header = cfg.KeyHeaderName
	if t != b.table {
		b.table = t
		b.groups = groupSlices(t)
	}
	b.mu.Unlock()
	err := b.child.UpdateClientConnState(balancer.ClientConnState{
		ResolverState: pickfirst.EnableHealthListener(ccs.ResolverState),
	})
	b.mu.Lock()
	b.inhibit = false
	b.updatePickerLocked()
	b.mu.Unlock()
	return err
}

// UpdateState receives endpointsharding's state, whose picker carries
// every child's state.
func (b *routingBalancer) UpdateState(s balancer.State) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state = s
	b.hasKids = true
	if !b.inhibit {
		b.updatePickerLocked()
	}
}

func (b *routingBalancer) updatePickerLocked() {
	if !b.hasKids {
		return
	}
	b.ClientConn.UpdateState(balancer.State{
		ConnectivityState: b.state.ConnectivityState,
		Picker:            newPicker(b.table, b.groups, endpointsharding.ChildStatesFromPicker(b.state.Picker), b.header),
	})
}

func (b *routingBalancer) ResolverError(err error) { b.child.ResolverError(err) }

func (b *routingBalancer) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}

func (b *routingBalancer) Close() { b.child.Close() }

// ExitIdle does nothing: endpointsharding reconnects idle children itself.
func (b *routingBalancer) ExitIdle() {}

// sliceGroups maps each slice of a table to its set of task addresses,
// deduplicated: jobs have many slices but few distinct sets of tasks, so a
// picker is rebuilt per set, not per slice, when a connection changes.
type sliceGroups struct {
	of    []int32    // of[i] is slice i's group
	addrs [][]string // addrs[g] are group g's task addresses
}

func groupSlices(t *clerk.Table) *sliceGroups {
	if t == nil {
		return nil
	}
	n := len(t.Assignment().Slices)
	g := &sliceGroups{of: make([]int32, n)}
	index := make(map[string]int32)
	var sb strings.Builder
	for i := range n {
		addrs := t.Addrs(i)
		sb.Reset()
		for _, a := range addrs {
			sb.WriteString(a)
			sb.WriteByte(0)
		}
		k := sb.String()
		id, ok := index[k]
		if !ok {
			id = int32(len(g.addrs))
			index[k] = id
			g.addrs = append(g.addrs, addrs)
		}
		g.of[i] = id
	}
	return g
}

// picker picks by key. It is immutable: a new one is built whenever the
// assignment or a connection's state changes.
type picker struct {
	table  *clerk.Table
	of     []int32
	groups []group
	ready  []balancer.Picker // every ready task: the fallback
	wait   bool              // some task is connecting
	header string
}

// group is one set of tasks a slice lists.
type group struct {
	ready []balancer.Picker // its ready tasks' pickers
	wait  bool              // none ready, but one is connecting: wait for it
}

func newPicker(t *clerk.Table, g *sliceGroups, kids []endpointsharding.ChildState, header string) *picker {
	p := &picker{table: t, header: header}
	byAddr := make(map[string]balancer.State, len(kids))
	for _, k := range kids {
		s := k.State
		for _, a := range k.Endpoint.Addresses {
			byAddr[a.Addr] = s
		}
		switch s.ConnectivityState {
		case connectivity.Ready:
			p.ready = append(p.ready, s.Picker)
		case connectivity.Connecting, connectivity.Idle:
			p.wait = true
		}
	}
	if t == nil || g == nil {
		return p
	}
	p.of = g.of
	p.groups = make([]group, len(g.addrs))
	for i, addrs := range g.addrs {
		grp := &p.groups[i]
		for _, a := range addrs {
			s, ok := byAddr[a]
			if !ok {
				continue
			}
			switch s.ConnectivityState {
			case connectivity.Ready:
				grp.ready = append(grp.ready, s.Picker)
			case connectivity.Connecting, connectivity.Idle:
				grp.wait = true
			}
		}
	}
	return p
}

// errNoTask is the error of a call no task can take.
var errNoTask = status.Error(codes.Unavailable, "grpcroute: no task of the job is reachable")

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	cands := p.ready
	if p.table != nil {
		if h, ok := sliceKeyOf(info.Ctx, p.header); ok {
			g := &p.groups[p.of[p.table.Lookup(h)]]
			switch {
			case len(g.ready) > 0:
				cands = g.ready
			case g.wait:
				return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
			}
		}
	}
	switch len(cands) {
	case 0:
		if p.wait {
			return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
		}
		return balancer.PickResult{}, errNoTask
	case 1:
		return cands[0].Pick(info)
	}
	return cands[rand.IntN(len(cands))].Pick(info)
}
