// Package e2e holds end-to-end tests: they build the slicerd and example
// binaries and run them as separate processes talking over loopback, the
// way an operator runs them.
//
// The in-process integration tests, which run a cluster of agents inside
// one test process on the internal/clustertest harness (to control gossip
// latency and partitions), are in the subpackage e2e/inprocess; they build
// no binaries and check for leaked goroutines. Real network partitions,
// on a bed of network namespaces (internal/netbed), are in bench/partition
// (TestPartitions, and the longer bench command).
package e2e
