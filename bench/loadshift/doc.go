// Package loadshift offers synthetic load to a job sharded by slicerd and
// measures how the tasks share it, to time slicerd's reaction to a shift
// of the hot keys (the Slicer paper's §5.2.3 experiment).
//
// A Driver sends requests for a fixed set of keys whose popularity follows
// a power law (rank r gets weight 1/r^exponent), routing each with a Clerk
// (PickTask) to one of the tasks serving the key. Shift re-deals the ranks
// to the keys at random, so the hot keys move. A Meter counts, from the
// driver's side, the requests each task answered in one-second buckets;
// imbalance is max/mean of the per-task counts over a trailing window, the
// mean taken over every task of the current assignment.
//
// The request path is the kvcache example's: GET /kv/{key} on the task's
// HTTP address. Any HTTP answer counts as load the task received.
package loadshift
