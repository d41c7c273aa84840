package gossip

import (
	"fmt"
	"log"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
)

// Timer profiles.
const (
	// ProfileLAN uses memberlist's DefaultLANConfig timers: a failed member
	// is detected in a few seconds on a data-centre network.
	ProfileLAN = "lan"
	// ProfileLocal uses memberlist's DefaultLocalConfig timers, meant for
	// loopback: shorter timeouts, fewer indirect probes.
	ProfileLocal = "local"
)

// Config configures a gossip Node.
type Config struct {
	// NodeName is the member name; required and unique in the cluster.
	NodeName string
	// BindAddr is the IP:port gossip binds for both TCP and UDP. Port 0
	// picks a free port; Node.GossipAddr reports it.
	BindAddr string
	// AdvertiseAddr, if set, is the host:port other members use to reach
	// this node (NAT, containers). Empty advertises the bound address, or a
	// private interface address when bound to 0.0.0.0.
	AdvertiseAddr string
	// Join lists existing members' gossip addresses (host:port). Start does
	// not join; pass them to Node.Join or Node.RetryJoin.
	Join []string
	// Self is the identity advertised in tags (Roles, Job, Task, RPCAddr).
	// Its Name, GossipAddr and Status are ignored.
	Self Peer
	// Profile selects the base timers: "lan" (default) or "local".
	Profile string

	// Timer overrides; zero keeps the profile's value.
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	GossipInterval time.Duration
	SuspicionMult  int
	// PushPullInterval is how often a member exchanges its whole member
	// list with one other member (memberlist scales it up beyond 32
	// members). Besides repairing anything gossip lost, this is what
	// tells a member about others that its seed had not yet taken in when
	// it joined: a node that joins a seed just after another node did can
	// miss that node until the next exchange.
	PushPullInterval time.Duration
	// ReapInterval is how often failed and left members are checked for
	// removal; ReconnectTimeout and TombstoneTimeout are how long failed
	// and left members stay listed (serf's defaults: 15 s, 24 h, 24 h).
	ReapInterval     time.Duration
	ReconnectTimeout time.Duration
	TombstoneTimeout time.Duration
	// ReconnectInterval is how often the cluster, in aggregate, tries to
	// reconnect to each member it holds failed (serf's default: 30 s).
	// After a partition heals, the two sides hold each other failed until
	// one reconnects: that, not failure detection, bounds how soon they
	// merge again. Each try is one TCP connection to one failed member.
	// 0: DefaultReconnectInterval.
	ReconnectInterval time.Duration
	// DeadNodeReclaimTime is how long after a member is declared failed its
	// name stays bound to its old address. Zero frees the name at once, so
	// a task restarted elsewhere under the same name rejoins without delay.
	DeadNodeReclaimTime time.Duration
	// RejoinFile, if set, is a file where the node keeps the gossip
	// addresses of a few members it last saw alive, and from which it
	// joins them when it starts (besides Join). A node that is the only
	// seed of its tasks (a single-node slicerd) is otherwise unknown to
	// them after a quick restart until one of them exchanges member
	// lists with it, a push-pull interval or more, while they still count
	// it alive. It holds addresses only, rewritten at most once a second
	// while membership changes.
	RejoinFile string

	// SettleSamples, when positive, makes the node advertise its network
	// coordinate as settling (Peer.Settling) from its start until the
	// coordinate has been updated this many times, one update per answered
	// probe: DefaultSettleSamples is 8 s at the default probe interval.
	// Zero advertises nothing: the member counts as settled.
	SettleSamples int

	// SendDelay, when positive, holds back everything this member sends
	// over gossip by that long, so that its network coordinate, and every
	// round-trip estimate to it, moves away from the others'. It is a
	// testing aid for proximity on one machine (slicerd --gossip-delay);
	// leave it zero in production.
	SendDelay time.Duration

	// Keys turn on gossip encryption: memberlist encrypts everything it
	// sends with the first key (AES-GCM) and drops every packet that none
	// of the keys decrypts, so a member without a key cannot join or be
	// heard. Each key is 16, 24 or 32 bytes. Nil keeps gossip unencrypted.
	Keys [][]byte
	// KeyringFile, if set, is where the installed keys persist (serf's
	// format: a JSON array of base64 keys, primary first, mode 0600).
	// The Node's key methods rewrite it, so a restarted member still holds
	// the current keys. A file that exists wins over Keys; if it does not
	// exist, Start creates it from Keys.
	KeyringFile string

	// Transport replaces the real UDP/TCP transport (tests inject latency
	// and drops with NewDelayTransport). The node owns it and shuts it down,
	// also when Start fails. BindAddr is then not bound, only validated.
	Transport memberlist.NodeAwareTransport
	// Logger receives the node's logs and serf's and memberlist's, adapted
	// to slog. Nil discards them.
	Logger *slog.Logger
}

// DefaultSettleSamples is the SettleSamples slicerd's nodes use: a fresh
// Vivaldi coordinate among settled ones moves most of the way to its
// place in its first ten or so updates (each moves it a fifth of its
// error towards the probed member), and twenty leave every member a copy
// of it taken after a dozen.
const DefaultSettleSamples = 20

// DefaultReconnectInterval is Config.ReconnectInterval when unset: the
// two sides of a healed partition find each other within about this long.
const DefaultReconnectInterval = 2 * time.Second

// DefaultConfig returns the configuration for a node on a LAN: the lan
// profile, bound to 127.0.0.1:7946. NodeName and Self must still be set.
//
// Its failure-detection timers are faster than memberlist's LAN defaults
// (1 s probes, 500 ms probe timeout, suspicion 4×), because a failed
// Assigner's jobs wait for its detection before another Assigner takes
// them over. A member that stops answering is suspected once a probe of it
// fails (every member probes one other per interval, in turn, so that
// takes one to a few probe intervals) and declared failed when one other
// member has confirmed the suspicion and the suspicion timeout has passed:
// SuspicionMult × max(1, log10(members)) × ProbeInterval, so 1.2 s up to
// 10 members and 2.4 s at 100, against 4 s and 8 s with memberlist's
// defaults. With the Assigner's immediate takeover, a job gets a new
// generation from another Assigner typically 1.5–3 s after its Assigner
// was killed (docs/operations.md has measured figures). The price is 2.5
// times the probe traffic (a small UDP packet pair per member every
// 400 ms) and less slack for a member paused by a GC or an overloaded host
// before it is suspected; an alive member refutes a suspicion as soon as
// it hears of it, so a short pause costs at most a needless hand-over.
// A 200 ms probe timeout (memberlist's own for its local profile) is still
// a hundred times a data-centre round trip; across regions use larger
// values.
func DefaultConfig() Config {
	return Config{
		BindAddr:      "127.0.0.1:7946",
		Profile:       ProfileLAN,
		ProbeInterval: 400 * time.Millisecond,
		ProbeTimeout:  200 * time.Millisecond,
		SuspicionMult: 3,
		// memberlist's LAN default is 30 s, its local one 15 s; a task
		// that joins while another Assigner is joining the same seed is
		// missing from that Assigner's view for up to this long.
		PushPullInterval: 10 * time.Second,
	}
}

// TestConfig returns a configuration for tests on loopback: a free port on
// 127.0.0.1 and short timers, so a failed member is detected within about
// a second, and full state exchanges every second, so that a member that
// joined through a seed just after another converges on it quickly. The
// probe timeout (100 ms) leaves room for a process stalled by the race
// detector on a busy two-core machine: shorter ones had live members
// declared failed mid-test. Self still needs roles.
func TestConfig(name string) Config {
	return Config{
		NodeName:         name,
		BindAddr:         "127.0.0.1:0",
		Profile:          ProfileLocal,
		ProbeInterval:    150 * time.Millisecond,
		ProbeTimeout:     100 * time.Millisecond,
		GossipInterval:   5 * time.Millisecond,
		SuspicionMult:    2,
		PushPullInterval: time.Second,
		ReapInterval:     100 * time.Millisecond,
		ReconnectTimeout: 5 * time.Second,
		TombstoneTimeout: 5 * time.Second,
	}
}

// minRetransmitMult is memberlist's LAN retransmit multiplier, kept for
// every profile (see serfConfig).
const minRetransmitMult = 4

// maxNodeNameLen matches serf's own node-name limit.
const maxNodeNameLen = 128

// validate checks the config and returns the advertised tags.
func (c Config) validate() (map[string]string, error) {
	if c.NodeName == "" {
		return nil, fmt.Errorf("%w: node name is empty; give every member a unique name", ErrConfig)
	}
	if c.SettleSamples < 0 {
		return nil, fmt.Errorf("%w: settle samples %d is negative; use 0 to advertise no settling", ErrConfig, c.SettleSamples)
	}
	if c.SendDelay < 0 || c.SendDelay > time.Minute {
		return nil, fmt.Errorf("%w: send delay %v must be between 0 and 1m", ErrConfig, c.SendDelay)
	}
	if len(c.NodeName) > maxNodeNameLen || strings.ContainsFunc(c.NodeName, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, fmt.Errorf("%w: node name %.40q must be 1-%d bytes without spaces or control characters", ErrConfig, c.NodeName, maxNodeNameLen)
	}
	if _, _, err := splitIPPort("bind address", c.BindAddr); err != nil {
		return nil, err
	}
	if c.AdvertiseAddr != "" {
		if _, port, err := splitIPPort("advertise address", c.AdvertiseAddr); err != nil {
			return nil, err
		} else if port == 0 {
			return nil, fmt.Errorf("%w: advertise address %q needs a real port, not 0", ErrConfig, c.AdvertiseAddr)
		}
	}
	for _, j := range c.Join {
		if err := validateJoinAddr(j); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	switch c.Profile {
	case "", ProfileLAN, ProfileLocal:
	default:
		return nil, fmt.Errorf("%w: unknown profile %q; use %q or %q", ErrConfig, c.Profile, ProfileLAN, ProfileLocal)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"probe interval", c.ProbeInterval}, {"probe timeout", c.ProbeTimeout},
		{"gossip interval", c.GossipInterval}, {"push-pull interval", c.PushPullInterval},
		{"reap interval", c.ReapInterval},
		{"reconnect timeout", c.ReconnectTimeout}, {"tombstone timeout", c.TombstoneTimeout},
		{"reconnect interval", c.ReconnectInterval},
		{"dead node reclaim time", c.DeadNodeReclaimTime},
	} {
		if d.v < 0 {
			return nil, fmt.Errorf("%w: %s is negative (%v); use zero for the profile default", ErrConfig, d.name, d.v)
		}
	}
	if c.SuspicionMult < 0 {
		return nil, fmt.Errorf("%w: suspicion multiplier is negative (%d); use zero for the profile default", ErrConfig, c.SuspicionMult)
	}
	if err := validateKeys(c.Keys); err != nil {
		return nil, err
	}
	tags, err := c.Self.Tags()
	if err != nil {
		return nil, fmt.Errorf("%w: self: %w", ErrConfig, err)
	}
	return tags, nil
}

// ValidateNodeName, ValidateBindAddr and ValidateJoinAddr check a node
// name, Config.BindAddr and one of Config.Join as Start does, so that a
// caller can refuse them before it starts anything else.
func ValidateNodeName(name string) error {
	if name == "" || len(name) > maxNodeNameLen || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("%w: node name %.40q must be 1-%d bytes without spaces or control characters", ErrConfig, name, maxNodeNameLen)
	}
	return nil
}

func ValidateBindAddr(addr string) error {
	_, _, err := splitIPPort("bind address", addr)
	return err
}

func ValidateJoinAddr(addr string) error {
	if err := validateJoinAddr(addr); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// splitIPPort parses IP:port. memberlist binds IP literals only; a host
// name would silently bind every interface.
func splitIPPort(what, addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %s %q: %v; use IP:port such as 127.0.0.1:7946", ErrConfig, what, addr, err)
	}
	if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("%w: %s %q: host must be an IP address (0.0.0.0 for every interface), not %q", ErrConfig, what, addr, host)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%w: %s %q: port %q is not in 0..65535", ErrConfig, what, addr, portStr)
	}
	return host, port, nil
}

func validateJoinAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("join address %q: %v; use host:port of a running member's gossip endpoint", addr, err)
	}
	if host == "" {
		return fmt.Errorf("join address %q has no host", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("join address %q: port %q is not in 1..65535", addr, port)
	}
	return nil
}

// serfConfig builds serf's configuration from a validated Config.
func (c Config) serfConfig(logger *slog.Logger, tags map[string]string, events chan serf.Event, guard *mergeGuard, keyringQuery func()) *serf.Config {
	var ml *memberlist.Config
	if c.Profile == ProfileLocal {
		ml = memberlist.DefaultLocalConfig()
	} else {
		ml = memberlist.DefaultLANConfig()
	}
	host, port, _ := splitIPPort("", c.BindAddr)
	ml.BindAddr, ml.BindPort = host, port
	ml.AdvertiseAddr, ml.AdvertisePort = "", port
	if c.AdvertiseAddr != "" {
		ml.AdvertiseAddr, ml.AdvertisePort, _ = splitIPPort("", c.AdvertiseAddr)
	}
	if c.ProbeInterval > 0 {
		ml.ProbeInterval = c.ProbeInterval
	}
	if c.ProbeTimeout > 0 {
		ml.ProbeTimeout = c.ProbeTimeout
	}
	if c.GossipInterval > 0 {
		ml.GossipInterval = c.GossipInterval
	}
	if c.SuspicionMult > 0 {
		ml.SuspicionMult = c.SuspicionMult
	}
	if c.PushPullInterval > 0 {
		ml.PushPullInterval = c.PushPullInterval
	}
	// A broadcast (a membership update) is passed on at most
	// RetransmitMult × log10(members+1) times by each member that receives
	// it. The local profile's 2 lets one member in four miss one about one
	// time in nine, until push-pull repairs it; LAN's 4 reaches every
	// member of a small cluster from the first sender.
	ml.RetransmitMult = max(ml.RetransmitMult, minRetransmitMult)
	// memberlist treats zero as "never reclaim"; a nanosecond is "at once".
	ml.DeadNodeReclaimTime = max(c.DeadNodeReclaimTime, time.Nanosecond)
	ml.Logger = log.New(&logWriter{logger: logger, component: "memberlist"}, "", 0)
	ml.LogOutput = nil

	sc := serf.DefaultConfig()
	sc.NodeName = c.NodeName
	sc.Tags = tags
	sc.EventCh = events
	sc.MemberlistConfig = ml
	sc.Logger = log.New(&logWriter{logger: logger, component: "serf", keyringQuery: keyringQuery}, "", 0)
	sc.LogOutput = nil
	if c.ReapInterval > 0 {
		sc.ReapInterval = c.ReapInterval
	}
	if c.ReconnectTimeout > 0 {
		sc.ReconnectTimeout = c.ReconnectTimeout
	}
	if c.TombstoneTimeout > 0 {
		sc.TombstoneTimeout = c.TombstoneTimeout
	}
	sc.ReconnectInterval = DefaultReconnectInterval
	if c.ReconnectInterval > 0 {
		sc.ReconnectInterval = c.ReconnectInterval
	}
	// A leave waits for its broadcast to leave our queue (BroadcastTimeout)
	// and then stays up to answer probes while it spreads
	// (LeavePropagateDelay). Serf's 5 s and 1 s suit the 1 s LAN probe
	// interval; scaling with the probe interval keeps test leaves fast.
	sc.BroadcastTimeout = 5 * ml.ProbeInterval
	sc.LeavePropagateDelay = ml.ProbeInterval
	// Serf's resolution shuts serf down underneath its owner from a
	// goroutine nobody waits for. The merge guard reports conflicts to
	// Join instead, and memberlist keeps the first holder of a name.
	sc.EnableNameConflictResolution = false
	// Vivaldi network coordinates ride on the probes memberlist sends
	// anyway (a few dozen bytes per ack); they estimate the round trip
	// between any two members, from which package lease picks each job's
	// preferred Assigner.
	sc.DisableCoordinates = false
	sc.SnapshotPath = ""
	sc.Merge = guard
	return sc
}
