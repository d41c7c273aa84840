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
	w0 := WriteCalls(os.Getpid())
	f, err := os.CreateTemp(t.TempDir(), "w")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 3 {
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if w1 := WriteCalls(os.Getpid()); w0 < 0 || w1 < w0+3 {
		t.Errorf("write calls went from %d to %d over 3 writes", w0, w1)
	}
}
