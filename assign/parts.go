package assign

import (
	"runtime"
	"sync"
)

// partMin is the fewest items worth a goroutine of their own: a pass over
// a million slices takes milliseconds, one over a thousand microseconds.
const partMin = 1 << 16

// parts is how many parts inParts cuts n items into: one per processor
// Go may run at once, but none smaller than partMin.
func parts(n int) int {
	return max(1, min(runtime.GOMAXPROCS(0), n/partMin))
}

// inParts calls f(part, lo, hi) for the k consecutive ranges
// [part*n/k, (part+1)*n/k) tiling [0, n), each on its own goroutine but the
// last, which runs on the caller's, and returns once all have returned.
// A part writes only its own range of shared output, or memory indexed
// by its part number.
func inParts(n, k int, f func(part, lo, hi int)) {
	var wg sync.WaitGroup
	for i := range k - 1 {
		wg.Go(func() { f(i, i*n/k, (i+1)*n/k) })
	}
	f(k-1, (k-1)*n/k, n)
	wg.Wait()
}
