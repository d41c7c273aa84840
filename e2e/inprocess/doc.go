// Package inprocess holds integration tests that run a whole slicerd
// cluster inside the test process on the internal/clustertest harness:
// real agents, gossip on loopback with a delaying transport, real Connect
// servers, Slicelets, Clerks and a shared bbolt or embedded etcd store.
// Unlike the tests in e2e they build no binaries, and they can set the
// latency of any gossip link, partition the cluster and heal it. Run one
// scenario with, for example,
//
//	go test -run TestKillPreferredFailsOver -v ./e2e/inprocess/
package inprocess
