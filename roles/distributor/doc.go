// Package distributor holds the two roles that serve assignments to
// subscribers without deciding them.
//
// The Distributor (distributor.go) pulls each job a subscriber asks for
// from the job's preferred Assigner, found in gossip by the same
// preference every Assigner and Slicelet computes, caches the newest
// generation and pushes it to every stream of the job through a
// watch.Latest; when the preference moves, so does the pull, and while no
// Assigner answers it keeps serving what it holds. A relay Distributor
// (Config.Upstreams) pulls from upstream Distributors instead, for a
// second level of fan-out, and from the Assigner only when they all fail.
// The Backup (backup.go)
// serves the same read API straight from the assignment store, sharing no
// logic with the Assigner or the Distributor, so that a fault in theirs
// cannot take it down too.
//
// Neither writes to the store, holds a lease or decides who may call
// them: the agent's auth layer has checked the caller before a request
// arrives here.
package distributor
