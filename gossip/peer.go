package gossip

import (
	"bytes"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"

	"github.com/slicerd/slicerd/assign"
)

// Role is a part a gossip member plays. A slicerd node runs any of the
// assigner, distributor and backup roles; a Slicelet advertises the task role.
type Role string

// Roles, in their canonical (sorted) order.
const (
	RoleAssigner    Role = "assigner"
	RoleBackup      Role = "backup"
	RoleDistributor Role = "distributor"
	RoleTask        Role = "task"
)

var knownRoles = []Role{RoleAssigner, RoleBackup, RoleDistributor, RoleTask}

// ParseRole parses one role name, as written in flags and tags.
func ParseRole(s string) (Role, error) {
	r := Role(s)
	if !slices.Contains(knownRoles, r) {
		return "", fmt.Errorf("%w: unknown role %q; use one of assigner, backup, distributor, task", ErrInvalidPeer, s)
	}
	return r, nil
}

// ParseRoles parses a comma-separated role list ("assigner,distributor")
// into a sorted, duplicate-free slice. Spaces around names are ignored.
func ParseRoles(s string) ([]Role, error) {
	var roles []Role
	for part := range strings.SplitSeq(s, ",") {
		r, err := ParseRole(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		roles = append(roles, r)
	}
	slices.Sort(roles)
	return slices.Compact(roles), nil
}

// Status is a member's gossip state.
type Status int

// Member states. StatusUnknown is the zero value, so an unset Status never
// reads as alive.
const (
	StatusUnknown Status = iota
	// StatusAlive: the member answers probes. For a task, it is serving.
	StatusAlive
	// StatusLeaving: the member announced a graceful leave.
	StatusLeaving
	// StatusLeft: the member left gracefully. For a task, it is drained.
	StatusLeft
	// StatusFailed: the member stopped answering probes without leaving
	// (crash, SIGKILL, partition). For a task, it lost health.
	StatusFailed
)

func (s Status) String() string {
	switch s {
	case StatusAlive:
		return "alive"
	case StatusLeaving:
		return "leaving"
	case StatusLeft:
		return "left"
	case StatusFailed:
		return "failed"
	default:
		return "unknown"
	}
}

func statusFromSerf(s serf.MemberStatus) Status {
	switch s {
	case serf.StatusAlive:
		return StatusAlive
	case serf.StatusLeaving:
		return StatusLeaving
	case serf.StatusLeft:
		return StatusLeft
	case serf.StatusFailed:
		return StatusFailed
	default:
		return StatusUnknown
	}
}

// TaskMemberName is the gossip member name of task of job: "task@job".
// Neither a job nor a task name may hold '@' or '/'; a '/' would break
// memberlist's "name/address" join syntax, which serf uses to rejoin
// members from its snapshot and to reconnect failed ones.
func TaskMemberName(job, task string) string { return task + "@" + job }

// Peer is the typed identity of a gossip member. Its serf tags are encoded by
// Tags and parsed by ParseMember, and nowhere else.
type Peer struct {
	Name    string // serf member name
	Roles   []Role // sorted, unique
	Job     string // set for RoleTask members
	Task    string // set for RoleTask members
	RPCAddr string // host:port of the member's RPC server (a task's serving address); "" while not serving
	// Capacity is a task's relative capacity (assign.Task.Capacity); 0,
	// meaning 1, is not advertised. Task members only.
	Capacity float64
	// MemoryLimit is the most state, in bytes, a task may hold
	// (assign.Task.MemoryLimit); 0, no limit, is not advertised. Task
	// members only.
	MemoryLimit int64
	// Draining says a task is giving up its slices before it stops
	// (slicelet.Slicelet.Drain). Task members only; it is the task's own
	// claim and moves only its own keys.
	Draining bool
	// HandoffAddr is where a task serves state handoff (HandoffService)
	// when not at RPCAddr: a sidecar serves it for the application at
	// RPCAddr. "" means RPCAddr. Task members only. Like every tag it is
	// the member's claim: with TLS a fetch checks that the server's
	// certificate names the task, so a forged address can only make a
	// fetch fail.
	HandoffAddr string
	// NoHandoff says the task serves no state handoff (it cannot export
	// its keys' state): a task that gains its keys starts them cold at
	// once instead of trying to fetch from it. Task members only; not
	// with HandoffAddr.
	NoHandoff bool
	// Settling says the member's network coordinate has not settled yet:
	// it started recently and has measured too few round trips for
	// distances to it to be trusted (Config.SettleSamples). Any role; the
	// node sets it, not its owner.
	Settling   bool
	GossipAddr string // host:port of the member's gossip endpoint (from the member, not a tag)
	Status     Status
}

// Has reports whether the peer plays role r.
func (p Peer) Has(r Role) bool {
	return slices.Contains(p.Roles, r)
}

// Tag keys and the schema version. See doc.go for the table.
const (
	tagSchema  = "slicerd"
	tagRoles   = "roles"
	tagJob     = "job"
	tagTask    = "task"
	tagRPC     = "rpc"
	tagCap     = "cap"
	tagMem     = "mem"
	tagDrain   = "drain"
	tagSettle  = "settling"
	tagHandoff = "handoff"
	tagNoState = "nohandoff"

	schemaVersion = "1"
)

// Tags encodes the peer's identity as serf tags. Name, GossipAddr and Status
// are not tags and are ignored. Roles may be given in any order; they are
// encoded sorted and without duplicates.
func (p Peer) Tags() (map[string]string, error) {
	if len(p.Roles) == 0 {
		return nil, fmt.Errorf("%w: no roles; a member needs at least one of assigner, backup, distributor, task", ErrInvalidPeer)
	}
	roles := slices.Clone(p.Roles)
	for _, r := range roles {
		if _, err := ParseRole(string(r)); err != nil {
			return nil, err
		}
	}
	slices.Sort(roles)
	roles = slices.Compact(roles)
	tags := map[string]string{
		tagSchema: schemaVersion,
		tagRoles:  joinRoles(roles),
	}
	if slices.Contains(roles, RoleTask) {
		if err := assign.ValidateJobName(p.Job); err != nil {
			return nil, fmt.Errorf("%w: task member: %w", ErrInvalidPeer, err)
		}
		if err := assign.ValidateTaskName(p.Task); err != nil {
			return nil, fmt.Errorf("%w: task member: %w", ErrInvalidPeer, err)
		}
		tags[tagJob] = p.Job
		tags[tagTask] = p.Task
		if err := assign.ValidateCapacity(p.Capacity); err != nil {
			return nil, fmt.Errorf("%w: task member: %w", ErrInvalidPeer, err)
		}
		if p.Capacity != 0 {
			tags[tagCap] = formatCapacity(p.Capacity)
		}
		if err := assign.ValidateMemoryLimit(float64(p.MemoryLimit)); err != nil {
			return nil, fmt.Errorf("%w: task member: %w", ErrInvalidPeer, err)
		}
		if p.MemoryLimit != 0 {
			tags[tagMem] = strconv.FormatInt(p.MemoryLimit, 10)
		}
		if p.Draining {
			tags[tagDrain] = "1"
		}
		if p.HandoffAddr != "" {
			if err := ValidateRPCAddr(p.HandoffAddr); err != nil {
				return nil, fmt.Errorf("%w: task member's handoff address: %w", ErrInvalidPeer, err)
			}
			tags[tagHandoff] = p.HandoffAddr
		}
		if p.NoHandoff {
			if p.HandoffAddr != "" {
				return nil, fmt.Errorf("%w: task member serves handoff at %s and says it serves none; set one of HandoffAddr and NoHandoff", ErrInvalidPeer, p.HandoffAddr)
			}
			tags[tagNoState] = "1"
		}
	} else if p.HandoffAddr != "" || p.NoHandoff {
		return nil, fmt.Errorf("%w: handoff is set (address %q, none %v) but the roles %v do not include task; only tasks serve handoff", ErrInvalidPeer, p.HandoffAddr, p.NoHandoff, roles)
	} else if p.Draining {
		return nil, fmt.Errorf("%w: draining is set but the roles %v do not include task; only tasks drain", ErrInvalidPeer, roles)
	} else if p.MemoryLimit != 0 {
		return nil, fmt.Errorf("%w: memory limit %d is set but the roles %v do not include task; only tasks have one", ErrInvalidPeer, p.MemoryLimit, roles)
	} else if p.Capacity != 0 {
		return nil, fmt.Errorf("%w: capacity %v is set but the roles %v do not include task; only tasks have a capacity", ErrInvalidPeer, p.Capacity, roles)
	} else if p.Job != "" || p.Task != "" {
		return nil, fmt.Errorf("%w: job %q and task %q are set but the roles %v do not include task; set both only for task members", ErrInvalidPeer, p.Job, p.Task, roles)
	}
	if p.RPCAddr != "" {
		if err := ValidateRPCAddr(p.RPCAddr); err != nil {
			return nil, err
		}
		tags[tagRPC] = p.RPCAddr
	}
	if p.Settling {
		tags[tagSettle] = "1"
	}
	if n := encodedTagsLen(tags); n > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: tags encode to %d bytes, above serf's limit of %d; shorten the job, task or RPC host name", ErrInvalidPeer, n, memberlist.MetaMaxSize)
	}
	return tags, nil
}

// formatCapacity is the canonical encoding of a capacity tag: the shortest
// decimal that reads back as the same float64.
func formatCapacity(c float64) string { return strconv.FormatFloat(c, 'g', -1, 64) }

func joinRoles(roles []Role) string {
	var b strings.Builder
	for i, r := range roles {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(string(r))
	}
	return b.String()
}

// ValidateRPCAddr accepts host:port with a non-empty host and a port in
// 1..65535: the address other members dial, so wildcards make no sense.
func ValidateRPCAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: RPC address %q: %v; use host:port", ErrInvalidPeer, addr, err)
	}
	if host == "" || strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == ',' }) {
		return fmt.Errorf("%w: RPC address %q has no usable host; advertise a host other members can dial, such as 10.0.0.5:8080", ErrInvalidPeer, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%w: RPC address %q: port %q is not in 1..65535", ErrInvalidPeer, addr, port)
	}
	return nil
}

// encodedTagsLen is the size of the tags as serf puts them on the wire: a
// magic byte and a msgpack map, encoded exactly as serf's encodeTags does.
func encodedTagsLen(tags map[string]string) int {
	var buf bytes.Buffer
	buf.WriteByte(255) // serf's tagMagicByte
	if err := codec.NewEncoder(&buf, &codec.MsgpackHandle{}).Encode(tags); err != nil {
		return memberlist.MetaMaxSize + 1 // a string map always encodes; treat failure as too big
	}
	return buf.Len()
}

// ParseMember turns a serf member into a Peer. It returns false for members
// that are not slicerd members (no schema tag, another schema version) or
// whose tags are invalid; callers ignore those members.
func ParseMember(m serf.Member) (Peer, bool) {
	p, err := parseTags(m.Tags)
	if err != nil {
		return Peer{}, false
	}
	p.Status = statusFromSerf(m.Status)
	if p.Status == StatusUnknown {
		return Peer{}, false
	}
	p.Name = m.Name
	if m.Addr != nil {
		p.GossipAddr = net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port)))
	}
	return p, true
}

// parseTags is the inverse of Peer.Tags. It accepts only the canonical
// encoding of the keys it knows (so a valid result re-encodes identically)
// and ignores keys it does not know, so a later schema can add tags without
// hiding its members from older nodes. Removing or changing the meaning of
// a tag needs a new schema version.
func parseTags(tags map[string]string) (Peer, error) {
	if v, ok := tags[tagSchema]; !ok {
		return Peer{}, fmt.Errorf("%w: no %q tag; not a slicerd member", ErrInvalidPeer, tagSchema)
	} else if v != schemaVersion {
		return Peer{}, fmt.Errorf("%w: tag schema %q; this node understands %q", ErrInvalidPeer, v, schemaVersion)
	}
	var p Peer
	rolesTag, ok := tags[tagRoles]
	if !ok || rolesTag == "" {
		return Peer{}, fmt.Errorf("%w: no roles", ErrInvalidPeer)
	}
	p.Roles = make([]Role, 0, 2)
	for part := range strings.SplitSeq(rolesTag, ",") {
		r, err := ParseRole(part)
		if err != nil {
			return Peer{}, err
		}
		if n := len(p.Roles); n > 0 && p.Roles[n-1] >= r {
			return Peer{}, fmt.Errorf("%w: roles %q are not sorted and unique", ErrInvalidPeer, rolesTag)
		}
		p.Roles = append(p.Roles, r)
	}
	job, hasJob := tags[tagJob]
	task, hasTask := tags[tagTask]
	if p.Has(RoleTask) {
		if err := assign.ValidateJobName(job); err != nil {
			return Peer{}, fmt.Errorf("%w: %w", ErrInvalidPeer, err)
		}
		if err := assign.ValidateTaskName(task); err != nil {
			return Peer{}, fmt.Errorf("%w: %w", ErrInvalidPeer, err)
		}
		p.Job, p.Task = job, task
		if v, ok := tags[tagCap]; ok {
			c, err := strconv.ParseFloat(v, 64)
			if err != nil || c == 0 || formatCapacity(c) != v {
				return Peer{}, fmt.Errorf("%w: capacity tag %q is not a canonical non-zero number", ErrInvalidPeer, v)
			}
			if err := assign.ValidateCapacity(c); err != nil {
				return Peer{}, fmt.Errorf("%w: %w", ErrInvalidPeer, err)
			}
			p.Capacity = c
		}
		if v, ok := tags[tagMem]; ok {
			m, err := strconv.ParseInt(v, 10, 64)
			if err != nil || m <= 0 || strconv.FormatInt(m, 10) != v {
				return Peer{}, fmt.Errorf("%w: memory tag %q is not a canonical positive integer", ErrInvalidPeer, v)
			}
			if err := assign.ValidateMemoryLimit(float64(m)); err != nil {
				return Peer{}, fmt.Errorf("%w: %w", ErrInvalidPeer, err)
			}
			p.MemoryLimit = m
		}
		if v, ok := tags[tagDrain]; ok {
			if v != "1" {
				return Peer{}, fmt.Errorf("%w: drain tag %q is not \"1\"", ErrInvalidPeer, v)
			}
			p.Draining = true
		}
		if v, ok := tags[tagHandoff]; ok {
			if err := ValidateRPCAddr(v); err != nil {
				return Peer{}, fmt.Errorf("%w: handoff tag: %w", ErrInvalidPeer, err)
			}
			p.HandoffAddr = v
		}
		if v, ok := tags[tagNoState]; ok {
			if v != "1" || p.HandoffAddr != "" {
				return Peer{}, fmt.Errorf("%w: nohandoff tag %q (with handoff tag %q): it is \"1\", and only without a handoff address", ErrInvalidPeer, v, p.HandoffAddr)
			}
			p.NoHandoff = true
		}
	} else if _, hasHandoff := tags[tagHandoff]; hasHandoff {
		return Peer{}, fmt.Errorf("%w: handoff tag on a member without the task role", ErrInvalidPeer)
	} else if _, hasNoState := tags[tagNoState]; hasNoState {
		return Peer{}, fmt.Errorf("%w: nohandoff tag on a member without the task role", ErrInvalidPeer)
	} else if _, hasDrain := tags[tagDrain]; hasDrain {
		return Peer{}, fmt.Errorf("%w: drain tag on a member without the task role", ErrInvalidPeer)
	} else if _, hasCap := tags[tagCap]; hasJob || hasTask || hasCap {
		return Peer{}, fmt.Errorf("%w: job, task or capacity tag on a member without the task role", ErrInvalidPeer)
	} else if _, hasMem := tags[tagMem]; hasMem {
		return Peer{}, fmt.Errorf("%w: memory tag on a member without the task role", ErrInvalidPeer)
	}
	if rpc, ok := tags[tagRPC]; ok {
		if err := ValidateRPCAddr(rpc); err != nil {
			return Peer{}, err
		}
		p.RPCAddr = rpc
	}
	if v, ok := tags[tagSettle]; ok {
		if v != "1" {
			return Peer{}, fmt.Errorf("%w: settling tag %q is not \"1\"", ErrInvalidPeer, v)
		}
		p.Settling = true
	}
	return p, nil
}

// TaskAttributes are what a task member says about itself beyond its
// job, name and address: the Peer fields a task's registration binds
// (AssignerService.RegisterTask) so that they need not be believed from
// gossip.
type TaskAttributes struct {
	Capacity    float64
	MemoryLimit int64
	Draining    bool
}

// Validate reports what is wrong with a, if anything.
func (a TaskAttributes) Validate() error {
	if err := assign.ValidateCapacity(a.Capacity); err != nil {
		return err
	}
	return assign.ValidateMemoryLimit(float64(a.MemoryLimit))
}

// Attributes returns p's task attributes.
func (p Peer) Attributes() TaskAttributes {
	return TaskAttributes{Capacity: p.Capacity, MemoryLimit: p.MemoryLimit, Draining: p.Draining}
}

// WithAttributes returns p with its task attributes set to a.
func (p Peer) WithAttributes(a TaskAttributes) Peer {
	p.Capacity, p.MemoryLimit, p.Draining = a.Capacity, a.MemoryLimit, a.Draining
	return p
}
