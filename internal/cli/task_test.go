package cli

import (
	"strings"
	"testing"
)

// TestTaskCommandErrors: wrong arguments are usage errors (exit 2) before
// anything is sent; an unknown job or a task that is not live is exit 1
// with a message that says what exists; undrain accepts any name.
func TestTaskCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"task", "drain", "kv"}, 2, "task drain needs two arguments, JOB and TASK"},
		{[]string{"task", "cordon", "kv", "kv-0", "extra"}, 2, "task cordon needs two arguments"},
		{[]string{"task", "drain", "kv", "kv-0", "--wait=maybe"}, 2, `invalid boolean value "maybe" for -wait`},
		{[]string{"task", "drain", "kv", "kv-0", "--", "--wait=false"}, 2, "task drain needs two arguments"},
		{[]string{"task", "drain", "Bad Job", "kv-0"}, 2, "invalid JOB"},
		{[]string{"task", "uncordon", "kv", "a/b"}, 2, "invalid TASK"},
		{[]string{"task", "drain", "--timeout", "soon", "kv", "kv-0"}, 2, "invalid value"},
	} {
		if code, out := slicerd(t, tc.args...); code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("slicerd %s: exit %d, output:\n%s\nwant exit %d and %q", strings.Join(tc.args, " "), code, out, tc.code, tc.want)
		}
	}

	addr := startAssigner(t)
	if code, out := slicerd(t, "task", "drain", "--addr", addr, "nosuchjob", "kv-0"); code != 1 || !strings.Contains(out, `no job "nosuchjob"`) {
		t.Errorf("drain in an unknown job: exit %d:\n%s", code, out)
	}
	if code, out := slicerd(t, "job", "set", "--addr", addr, "kv"); code != 0 {
		t.Fatalf("job set: exit %d:\n%s", code, out)
	}
	for _, sub := range []string{"drain", "cordon"} {
		if code, out := slicerd(t, "task", sub, "--addr", addr, "kv", "kv-9"); code != 1 || !strings.Contains(out, `job "kv" has no live task "kv-9"`) {
			t.Errorf("%s of a task that is not live: exit %d:\n%s", sub, code, out)
		}
	}
	// Clearing a mark needs no live task, and leaves the job as it was.
	code, out := slicerd(t, "task", "undrain", "--addr", addr, "kv", "kv-9")
	if code != 0 || strings.Contains(out, "drained ") {
		t.Errorf("undrain of a task that was not drained: exit %d:\n%s", code, out)
	}
}
