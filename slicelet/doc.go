// Package slicelet is the server-side library of slicerd: link it into
// each task of a sharded job (paper §2.2). A Slicelet
//
//   - makes the task a gossip member with the task role, its job, name and
//     serving address, so slicerd's Assigner counts it as live and assigns
//     it slices; cancelling Run leaves gossip gracefully, which is the
//     drain signal;
//   - follows the job's assignment through an internal Clerk whose servers
//     are the Distributors (and, as a fallback, the Backups) that gossip
//     reports alive, so the task needs no slicerd RPC address;
//   - answers IsAffinitizedKey (does the current assignment give this key
//     to this task?) without allocating or locking;
//   - tells Listeners which key ranges the task gained and lost, so it can
//     prefetch and drop state.
//   - measures load (paper §4.4): ReportLoad adds a cost to the slice a key
//     hashes into, without allocating or locking, and HTTPMiddleware and
//     Interceptor count one unit per request; once per Config.LoadWindow
//     the Slicelet sends the window's per-slice load to the live Assigner
//     with the lowest name, keeping it (decayed) for the next report when
//     no Assigner answers.
//
// Like the Clerk, a Slicelet keeps its last assignment while slicerd is
// unreachable. Assignment distribution is asynchronous: two tasks may
// briefly both believe they own a key, so a task that needs exclusive
// ownership must not rely on IsAffinitizedKey alone.
//
// Usage:
//
//	sl, err := slicelet.New(slicelet.Config{
//		Job:  "kv",
//		Task: "kv-0",
//		Addr: "10.0.0.5:8080",            // where clients reach this task
//		GossipAddr: "10.0.0.5:7947",      // this task's gossip endpoint
//		Join: []string{"10.0.0.1:7946"},  // slicerd's gossip address
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
