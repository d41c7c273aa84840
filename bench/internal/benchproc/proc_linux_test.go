package benchproc

import (
	"os"
	"testing"
)

func TestProcFiguresOfThisProcess(t *testing.T) {
	rss, hwm := Memory(os.Getpid())
	if rss <= 0 || hwm < rss {
		t.Errorf("VmRSS %d KiB, VmHWM %d KiB", rss, hwm)
	}
	// Burn a little CPU so the counter has ticked.
	before := CPUTime(os.Getpid())
	x := 0
	for i := range 200_000_000 {
		x += i
	}
	if after := CPUTime(os.Getpid()); after <= before || x == 0 {
		t.Errorf("CPU time went from %v to %v", before, after)
	}
}
