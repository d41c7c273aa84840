// Package clerk routes keys to the tasks of a job sharded by slicerd. It is
// the client-side library of the Slicer design (paper §2.3): link it into
// whatever sends requests to the job's tasks.
//
// A Clerk keeps one long-lived WatchAssignment stream to a slicerd
// Distributor and installs every newer, valid assignment it receives as an
// immutable lookup Table behind an atomic pointer. AssignedTasks hashes the
// key (assign.HashKey), binary-searches the slice ends (within one bucket
// of an index when the job has thousands of slices) and returns the
// slice's task addresses: tens of nanoseconds, no allocation, no lock, no
// network. PickTask returns one of them at random, which spreads the
// requests for a key slicerd replicated over all of its replicas.
//
// Failures only delay updates (paper §4.3). When a stream breaks, Run tries
// the next Distributor, then the Backup Distributors, with jittered
// exponential backoff between rounds; while nothing answers, the Clerk keeps
// routing with the last assignment it had. A stream on a Backup is ended
// every Config.BackupRecheck to move back to a Distributor when one is up.
// A stream counts as broken, too, when its server announced heartbeats
// (docs/api.md, "Heartbeats"; slicerd's servers do) and nothing arrived on
// it for api.HeartbeatMisses of the announced intervals: a server that
// stalled in the middle of a message, or that keeps its connection up but
// stopped sending on the stream, is left for the next one, not waited on
// for ever. A server that announces none keeps its stream while it is open.
// Assignments for another job, malformed ones and older generations are
// never installed.
//
// # Subsetting
//
// A Clerk from DefaultConfig prefers DefaultSubsetSize (3) Distributors:
// the ones subset.Rocksteadier picks for its frontend number among the
// configured or resolved Distributors sorted by address. It streams from
// the first that answers, in Rocksteadier's order; when none of them
// does, from the other Distributors, then from the Backups, and a stream
// outside the subset is ended every BackupRecheck to try the subset
// again. The frontend number is subset.FrontendIndex(Config.ID), with ID
// defaulting to hostname:pid, or Config.Frontend when the clients are
// numbered (a Slicelet uses its task number). Many clients so spread
// evenly over the Distributors, each holding connections to few of them.
// SubsetSize 0 tries every Distributor in turn from a random start.
//
// # Assignment cache
//
// With Config.CacheFile set, every accepted generation is also written to
// that file (format in package cachefile), so a Clerk that restarts while
// no slicerd server answers still routes: New reads the file and, if it
// holds a valid assignment of the job, installs it at once — Ready is
// closed, lookups answer and Generation is the cached one — before any
// server is contacted (Slicer §4.3's service-independent mode, extended
// to restarted clients). The writes happen on a goroutine Run owns, off
// the lookup path and the stream; a burst of generations is written once,
// as the newest, and the newest is flushed before Run returns. Each write
// goes to a temporary file in the same directory, is synced, renamed over
// the old file, and the directory is synced, so a crash leaves one whole
// file.
//
// Generations only go forward within one store incarnation. Every
// assignment carries the incarnation of the slicerd store that generated
// it, a random ID the store got when it was created; a store deleted and
// created again (a restarted demo, a wiped data dir, a new etcd prefix)
// has another and counts generations from 1 again. The first stream after
// a cache start asks for the server's current assignment whatever its
// generation, and every stream says which incarnation and generation the
// Clerk holds. An assignment of another incarnation replaces the held one
// (and the cache file) whatever its generation, as a reset: the old
// store's tasks are gone with it. Within the same incarnation a newer
// generation replaces the held one, an equal one confirms it, and an older
// one is ignored and logged at warn, since it means the store was restored
// from an older copy after the held assignment was written (restart the
// client without its cache file to get past it). A server that predates
// incarnations sends none; its assignments compare by generation only. A
// cache file written before incarnations holds an assignment of unknown
// incarnation, which any server's assignment with one replaces.
//
// A file that is corrupt, truncated, for another job or in a newer format
// is never routed on: New logs a warning naming the file and what is
// wrong, leaves the file untouched (for inspection), starts empty and
// fetches as usual; the first accepted assignment overwrites the file. A
// missing file is normal on first start. A cache file that cannot be
// written — its directory is missing or read-only, or the path is a
// directory — is a configuration error from New, so the mistake is found
// at deploy time rather than at the outage the cache was meant for; a
// write that fails later (a full disk) is logged and retried with the next
// generation and at shutdown, and never affects routing. Each process
// needs its own file: two Clerks must not share one.
//
// Usage:
//
//	cfg := clerk.DefaultConfig()
//	cfg.Job = "kv"
//	cfg.Addrs = []string{"slicerd-1:7070", "slicerd-2:7070"} // IPs, or names each node allows (--allowed-hosts)
//	cfg.CacheFile = "/var/lib/myapp/kv.assignment" // optional
//	c, err := clerk.New(cfg)
//	if err != nil { ... }
//	go c.Run(ctx)
//	if err := c.WaitReady(ctx); err != nil { ... }
//	if addr, ok := c.PickTaskString(userID); ok {
//		// send the request to addr; on error, try another of
//		// c.AssignedTasksString(userID)
//	}
//
// Package clerktest provides an in-process Distributor for testing code
// that uses a Clerk.
package clerk
