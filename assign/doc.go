// Package assign holds slicerd's data model and its sharding algorithms.
//
// An application key hashes to a 63-bit slice key (see HashKey). An
// Assignment partitions the slice-key space [0, 2^63) into contiguous slices,
// each served by a set of tasks, and carries a monotonic generation. The
// functions that produce assignments are pure: state in, a new assignment
// out. Nothing in this package opens a socket, starts a goroutine or reads a
// clock, so every decision can be replayed and tested from a script.
//
// Initial splits the key space evenly among a job's first tasks. Rebalance
// turns the previous assignment and the live tasks into the next one,
// moving as few keys as it can and recording every move with its reason.
// Membership does the same without merging slices, for a change of tasks
// or configuration that should move nothing else; Churn measures how much
// of the key space a change makes tasks load anew.
// MarshalBinary and UnmarshalAssignment store assignments compactly.
//
// Algorithm is a load-aware sharding policy: the previous assignment, the
// live tasks and the load measured under it in, the next assignment out.
// WeightedMove is Slicer's weighted-move algorithm; Static and
// ConsistentHash are baselines to compare it with. AlgorithmByName picks
// one by name. See README.md for diagrams and docs/algorithm.md for the
// definitions and phases.
package assign
