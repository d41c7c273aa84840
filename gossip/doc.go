// Package gossip is slicerd's membership layer: every slicerd node and
// every Slicelet (the library inside a user's server task) is a member of
// one serf cluster. Serf's failure detection is the task health signal and
// a graceful leave is the drain signal; nothing else reports health.
//
// # Identity
//
// A member's identity is a Peer, carried in serf tags. Peer.Tags encodes
// it and ParseMember parses it; no other code reads tags. The schema:
//
//	key      value                                       present
//	-------  ------------------------------------------  ---------------------
//	slicerd  schema version, "1"                          always
//	roles    sorted, comma-separated roles, e.g.          always (at least one)
//	         "assigner,backup,distributor" or "task"
//	job      job name (assign.ValidateJobName)            task members only
//	task     task name (assign.ValidateTaskName)          task members only
//	rpc      host:port of the member's RPC server; for    once the member serves
//	         a task, its serving address
//	cap      a task's relative capacity, the shortest     task members whose
//	         decimal of assign.Task.Capacity ("2",        capacity is not 1
//	         "0.5"); absent means 1
//	mem      a task's memory limit in bytes, a decimal    task members with
//	         integer (assign.Task.MemoryLimit); absent    a memory limit
//	         means none
//	drain    "1" while a task drains (gives up its        draining task members
//	         slices before it stops)
//	handoff  host:port where a task serves state handoff  task members served
//	         when not at rpc (a sidecar's, for its        by a sidecar with
//	         application)                                 --handoff-addr
//	nohandoff "1": the task serves no state handoff, so   task members that
//	         a task gaining its keys starts them cold     cannot export state
//	settling "1" while the member's network coordinate    members started with
//	         has not settled (Config.SettleSamples)       SettleSamples, until
//	                                                      it has settled
//
// The member name and gossip address come from serf, not tags. Members
// without the slicerd tag, or with another schema version, are not
// slicerd's: ParseMember ignores them, and a node refuses to merge with a
// cluster that contains them (a wrong join address must not fuse two
// clusters). Parsing accepts only the canonical encoding of known keys and
// ignores unknown keys, so a later version may add tags; changing or
// removing one needs a new schema version. All tags together must fit
// serf's 512-byte limit, which Peer.Tags checks.
//
// # Health
//
// Serf's member status is the health signal:
//
//	status    meaning for a task             slicerd's reading
//	--------  -----------------------------  ---------------------------------
//	alive     answers probes                 serving; may hold slices
//	leaving   announced a graceful leave     draining; move its slices now
//	left      left gracefully                drained; move its slices now
//	failed    stopped answering probes       health lost (crash, SIGKILL,
//	          without leaving                partition); move its slices
//
// A task that is killed looks failed once the others' probes and suspicion
// time out; one that calls Node.Leave looks left as soon as the leave
// spreads, which is why a task should leave before it stops serving.
// Failed and left members stay listed (ReconnectTimeout, TombstoneTimeout)
// until serf reaps them. A failed member's name is free for a new process
// at once (DeadNodeReclaimTime), so a restarted task rejoins under its name
// even from a new address; while the old holder is still believed alive,
// Join reports ErrNameConflict and RetryJoin keeps trying.
//
// # Profiles
//
// Config.Profile picks memberlist's timer set: "lan" (DefaultLANConfig:
// 1 s probes, 500 ms probe timeout, suspicion 4×) for real networks, or
// "local" (DefaultLocalConfig: shorter timeouts, one indirect probe) for
// loopback. Config fields override single timers; DefaultConfig sets
// 400 ms probes, a 200 ms probe timeout and suspicion 3×, so a failed
// member is declared failed in about 1.5–2.5 s in a cluster of ten (see
// DefaultConfig for the trade-off). TestConfig shrinks them to
// milliseconds, as serf's own tests do,
// so tests see failures well within a second. Serf's leave broadcast
// timeout and leave propagation delay scale with the probe interval
// (5× and 1×, serf's defaults at 1 s).
//
// # Lifecycle
//
// Start binds the gossip port and starts serf; it does not join. Join makes
// one attempt and RetryJoin repeats until one succeeds. Changes signals
// membership changes to subscribers, coalesced, without ever blocking serf.
// Leave leaves gracefully; Shutdown stops everything and waits for it.
//
// Serf and memberlist log through the standard library; their lines are
// adapted to the node's slog.Logger, with levels taken from the "[DEBUG]",
// "[INFO]", "[WARN]" and "[ERR]" prefixes and a component attribute of
// "serf" or "memberlist".
//
// # Encryption
//
// Config.Keys turn on encryption: every packet and stream is sealed with
// the primary key and anything no installed key opens is dropped, counted
// and logged, so a member without the key cannot join. Sealing happens in
// the transport, below memberlist, in memberlist's own wire format
// (encryption version 1), so members that encrypt with memberlist's
// keyring interoperate; memberlist and serf themselves run without a
// keyring, which leaves serf's keyring queries, which anyone holding the
// key can send, nothing to list or change. They are counted and logged
// as refused (Node.Refusals).
//
// The keyring changes only through the Node's methods (InstallKey,
// UseKey, RemoveKey, SetKeys), which act on this node alone; slicerd's
// agents call them when an admin asks over their authenticated API, and
// hand each change to the other agents and, through registrations, to
// tasks. Config.KeyringFile persists the keyring in serf's format; it
// wins over Keys when it exists, and every change rewrites it. Without
// keys gossip is unencrypted, which keeps the single-node demo free of
// setup.
//
// # Proximity and the preferred Assigner
//
// Serf's Vivaldi network coordinates ride on the probes: every answer to a
// probe carries the prober's peer's coordinate, and Node.RTT estimates the
// round trip between any two members from them. Gossip is membership
// only: the lease package chooses each job's preferred Assigner from the
// live Assigners, the job's live tasks and these estimates
// (lease.Preference): the Assigner with the lowest median RTT to the job's
// tasks, kept until another is nearer by a margin (20% and 1 ms by
// default), with ties and unknown distances broken by a rendezvous hash of
// job and Assigner name. Assigners, Distributors and Slicelets all choose
// with Node.Peers and Node.RTT, so they agree whenever their gossip views
// do.
//
// A member's coordinate starts from scratch whenever its process starts,
// and moves a long way over its first probes; until then every member
// holds a different, and wrong, picture of where it is, and distances to
// it mislead. A node started with Config.SettleSamples advertises itself
// as settling (Peer.Settling, the settling tag) until its coordinate has
// been updated that many times, then clears the tag once, logging
// "network coordinate settled". Every member sees the tag the same way,
// so they all leave a restarted Assigner out of their choices until it
// has settled, and all take it in at the same change.
//
// For tests of many members on one machine, NewDelayTransport wraps a
// member's transport to add per-link latency or drop a link, since the
// kernel offers no netem here.
package gossip
