// Package slicelet is the server-side library of slicerd: link it into
// each task of a sharded job (paper §2.2). A Slicelet
//
//   - makes the task a gossip member with the task role, its job, name and
//     serving address, so slicerd's Assigner counts it as live and assigns
//     it slices; cancelling Run leaves gossip gracefully, which is the
//     drain signal;
//   - once it has joined gossip, follows the job's assignment through an
//     internal Clerk whose servers are the Distributors (and, as a
//     fallback, the Backups) that gossip reports alive, so the task needs
//     no slicerd RPC address; with
//     Config.SubsetSize (DefaultConfig sets 3) it prefers the few
//     Distributors subset.Rocksteadier picks for its task number, so a
//     job's tasks spread evenly over them;
//   - answers IsAffinitizedKey (does the current assignment give this key
//     to this task?) without allocating or locking;
//   - tells Listeners which key ranges the task gained and lost, so it can
//     prefetch and drop state.
//   - measures load (paper §4.4): ReportLoad adds a cost to the slice a key
//     hashes into, without allocating or locking, and HTTPMiddleware and
//     Interceptor count one unit per request; once per Config.LoadWindow
//     (DefaultLoadWindow, 2 s) the Slicelet sends the window's per-slice
//     load to the job's preferred Assigner, chosen from gossip as the
//     Assigners choose it (the one that generates the job), keeping the
//     load, halved, for the next report when no Assigner answers.
//
// Like the Clerk, a Slicelet keeps its last assignment while slicerd is
// unreachable. Assignment distribution is asynchronous: two tasks may
// briefly both believe they own a key, so a task that needs exclusive
// ownership must not rely on IsAffinitizedKey alone.
//
// # Assignment cache
//
// With Config.CacheFile set, the Slicelet keeps the newest assignment it
// accepted in that file, in the background (format and write protocol in
// clerk/cachefile; behaviour as for clerk.Config.CacheFile). A Slicelet
// that restarts with a valid cache file is Ready from New: it answers
// IsAffinitizedKey from the cached assignment and a listener added with
// AddListener is told the cached ranges, before gossip starts and before
// any Distributor answers; it treats those slices as owned until it hears
// a newer generation, which the first stream asks for straight away.
//
// That matches Slicer's affinity semantics (§4.2, §4.5).
// IsAffinitizedKey was always a possibly stale answer, since assignments
// reach tasks and clients asynchronously. While slicerd is down, the job's
// clients route by the last generation they heard — in memory, or from
// their own cache files after a restart — which is the generation the task
// cached too, so a task that claims its cached slices agrees with the
// requests it is sent; one that claimed nothing would turn all of them
// away. While slicerd is up, the cached answer lasts one round trip to a
// Distributor, like a task that never restarted but is a generation
// behind. The cache never moves a slice; only slicerd assigns. An
// application that needs exclusive ownership must not rely on
// IsAffinitizedKey alone, with or without the cache. A bad cache file is
// logged and ignored (the task starts owning nothing), a newer generation
// from slicerd always replaces the cached one, an older one never does
// (see the clerk package documentation for the store-reset case), and an
// unwritable cache path makes New fail.
//
// Planned changes. Drain (call it on SIGTERM) advertises the task as
// draining: slicerd moves its keys to other tasks while it keeps serving,
// and Drain returns once it owns nothing, so a deploy stops a task only
// after its keys have a new owner. With ExportState and ImportState the
// keys' state goes with them: a task that gains keys fetches their state
// from the task that held them over the HandoffService, which the task
// serves on its own address (HandoffHandler), and AwaitState holds a
// request for a key whose state is on its way. Capacity, MemoryLimit and
// StateBytes tell placement how much the task can carry.
//
// Usage:
//
//	sl, err := slicelet.New(slicelet.Config{
//		Job:  "kv",
//		Task: "kv-0",
//		Addr: "10.0.0.5:8080",            // where clients reach this task
//		GossipAddr: "10.0.0.5:7947",      // this task's gossip endpoint
//		Join: []string{"10.0.0.1:7946"},  // slicerd's gossip address
//		CacheFile: "/var/lib/kv/assignment", // optional: route through restarts
//	})
//	if err != nil { ... }
//	sl.AddListener(cache) // OnChangedSlices(assigned, unassigned []assign.Slice)
//	go sl.Run(ctx)        // serve until Run returns, then stop serving
//
//	func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
//		if !sl.IsAffinitizedKeyString(key) {
//			// misrouted: the client's assignment is stale
//		}
//	}
package slicelet
