// Package clerk routes keys to the tasks of a job sharded by slicerd. It is
// the client-side library of the Slicer design (paper §2.3): link it into
// whatever sends requests to the job's tasks.
//
// A Clerk keeps one long-lived WatchAssignment stream to a slicerd
// Distributor and installs every newer, valid assignment it receives as an
// immutable lookup Table behind an atomic pointer. AssignedTasks hashes the
// key (assign.HashKey), binary-searches the slice ends and returns the
// slice's task addresses: tens of nanoseconds, no allocation, no lock, no
// network. PickTask returns one of them at random, which spreads the
// requests for a key slicerd replicated over all of its replicas.
//
// Failures only delay updates (paper §4.3). When a stream breaks, Run tries
// the next Distributor, then the Backup Distributors, with jittered
// exponential backoff between rounds; while nothing answers, the Clerk keeps
// routing with the last assignment it had. A stream on a Backup is ended
// every Config.BackupRecheck to move back to a Distributor when one is up.
// Assignments for another job, malformed ones and older generations are
// never installed.
//
// Usage:
//
//	cfg := clerk.DefaultConfig()
//	cfg.Job = "kv"
//	cfg.Addrs = []string{"slicerd-1:7070", "slicerd-2:7070"}
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
