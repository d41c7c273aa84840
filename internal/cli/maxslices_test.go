package cli

import (
	"strings"
	"testing"
)

// job set --max-slices stores the job's slice cap, and one above the
// assigner's --max-slices-per-job is refused, naming that flag.
func TestJobSetMaxSlices(t *testing.T) {
	addr := startAssigner(t)
	code, out := slicerd(t, "job", "set", "--addr", addr, "--max-slices", "500", "kv")
	if code != 0 || !hasSetting(out, "max slices", "500") {
		t.Fatalf("job set --max-slices 500: exit %d\n%s", code, out)
	}
	code, out = slicerd(t, "job", "set", "--addr", addr, "--max-slices", "200000", "kv")
	if code != 1 || !strings.Contains(out, "--max-slices-per-job 100000") {
		t.Errorf("job set --max-slices 200000: exit %d, output:\n%s\nwant exit 1 naming --max-slices-per-job", code, out)
	}
	if code, out = slicerd(t, "job", "get", "--addr", addr, "kv"); code != 0 || !hasSetting(out, "max slices", "500") {
		t.Errorf("after the refused set, job get: exit %d\n%s", code, out)
	}
}
