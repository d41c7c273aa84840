//go:build race

package storagetest

// raceEnabled is whether the race detector is on: it slows the large-job
// test about tenfold (an in-process etcd writes its pieces instrumented
// too), so that test runs smaller under it.
const raceEnabled = true
