package cli

import (
	"strings"
	"testing"
)

// job pin and job unpin are a pair; job move, pin's older name, still runs
// pin but is not listed.
func TestPinCommands(t *testing.T) {
	code, out := slicerd(t, "job", "--help")
	if code != 0 || !strings.Contains(out, "\n   pin ") || !strings.Contains(out, "\n   unpin ") || strings.Contains(out, "\n   move ") {
		t.Errorf("job --help: exit %d; want pin and unpin listed, and not move:\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "pin", "--key", "k", "kv"}, "job pin needs --to TASK"},
		{[]string{"job", "move", "--key", "k", "kv"}, "job move needs --to TASK"},
		{[]string{"job", "pin", "--to", "kv-0", "kv"}, "job pin needs one of --key or --slice"},
		{[]string{"job", "unpin", "kv"}, "job unpin needs one of --key or --slice"},
	} {
		if code, out := slicerd(t, tc.args...); code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("slicerd %s: exit %d:\n%s\nwant exit 2 and %q", strings.Join(tc.args, " "), code, out, tc.want)
		}
	}

	addr := startAssigner(t)
	if code, out := slicerd(t, "job", "set", "--addr", addr, "kv"); code != 0 {
		t.Fatalf("job set: exit %d:\n%s", code, out)
	}
	for _, sub := range []string{"pin", "move"} {
		code, out := slicerd(t, "job", sub, "--addr", addr, "--key", "k", "--to", "kv-9", "kv")
		if want := `job ` + sub + `: job "kv" has no live task "kv-9"`; code != 1 || !strings.Contains(out, want) {
			t.Errorf("job %s to a task that is not live: exit %d:\n%s\nwant exit 1 and %q", sub, code, out, want)
		}
	}
	if code, out := slicerd(t, "job", "unpin", "--addr", addr, "--slice", "0x0-0x1000", "kv"); code != 0 || strings.Contains(out, "  pins") {
		t.Errorf("job unpin where nothing is pinned: exit %d:\n%s", code, out)
	}
}
