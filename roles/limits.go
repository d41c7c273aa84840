package roles

import "runtime"

// maxStartingRPCsLimit bounds --max-starting-rpcs: far above what any
// machine starts at once, and below what would overflow the counts.
const maxStartingRPCsLimit = 1 << 20

// maxStartingHandlers is how many RPCs the node serves at once until they
// answer or wait (internal/startgate):
// configured (--max-starting-rpcs), or by default 32 per CPU the Go
// scheduler runs on, and at least 64. A handler on the CPU is done with
// that part in a millisecond or less, so the default keeps every CPU
// busy while the run queue stays short; one that holds its place longer
// (a slow store, say) stops counting after 100 to 200 ms.
func maxStartingHandlers(configured int) int {
	if configured > 0 {
		return configured
	}
	return max(64, 32*runtime.GOMAXPROCS(0))
}
