// Package e2e holds end-to-end tests: they build the slicerd and example
// binaries and run them as separate processes talking over loopback, the
// way an operator runs them.
//
// The in-process integration tests, which run a cluster of agents inside
// one test process on the internal/clustertest harness (to control gossip
// latency and partitions), are in the subpackage e2e/inprocess; they build
// no binaries and check for leaked goroutines.
package e2e
