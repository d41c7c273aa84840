package cli

import (
	"strings"
	"testing"
)

// job history and job why: usage errors exit 2 with what to do, an
// unknown job exits 1 naming it, and a job without assignment answers.
func TestHistoryCommands(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"job", "why", "kv"}, 2, "job why needs two arguments, JOB and KEY"},
		{[]string{"job", "why", "kv", "k", "--hex"}, 2, "flags go before JOB KEY"},
		{[]string{"job", "why", "--hex", "kv", "zz"}, 2, `invalid KEY "zz" for --hex`},
		{[]string{"job", "why", "--slice-key", "kv", "0x8000000000000000"}, 2, "give a number below 2^63"},
		{[]string{"job", "why", "--slice-key", "kv", "twelve"}, 2, `invalid slice key "twelve"`},
		{[]string{"job", "why", "--slice-key", "--hex", "kv", "12"}, 2, "do not go together"},
		{[]string{"job", "history", "--limit", "1000", "kv"}, 2, "at most 256"},
		{[]string{"job", "history"}, 2, "needs exactly one JOB argument"},
	} {
		if code, out := slicerd(t, tc.args...); code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("slicerd %s: exit %d, output:\n%s\nwant exit %d and %q", strings.Join(tc.args, " "), code, out, tc.code, tc.want)
		}
	}
	addr := startAssigner(t)
	for _, args := range [][]string{{"job", "history", "--addr", addr, "nosuchjob"}, {"job", "why", "--addr", addr, "nosuchjob", "k"}} {
		if code, out := slicerd(t, args...); code != 1 || !strings.Contains(out, `"nosuchjob"`) {
			t.Errorf("slicerd %s: exit %d:\n%s\nwant exit 1 naming the job", strings.Join(args, " "), code, out)
		}
	}
	if code, out := slicerd(t, "job", "set", "--addr", addr, "kv"); code != 0 {
		t.Fatalf("job set: exit %d:\n%s", code, out)
	}
	if code, out := slicerd(t, "job", "history", "--addr", addr, "kv"); code != 0 || !strings.Contains(out, "job kv: no decision recorded") {
		t.Errorf("history of a job without assignment: exit %d:\n%s", code, out)
	}
	if code, out := slicerd(t, "job", "why", "--addr", addr, "--hex", "kv", "6b6579"); code != 0 ||
		!strings.Contains(out, `key 0x6b6579 of job kv: slice key `) || !strings.Contains(out, "the job has no assignment yet") {
		t.Errorf("why in a job without assignment: exit %d:\n%s", code, out)
	}
}
