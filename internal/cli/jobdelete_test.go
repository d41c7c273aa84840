package cli

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// 'job delete' refuses to run without --yes when nobody can answer a
// prompt, deletes with it, and exits as the other job commands do.
func TestJobDeleteNeedsConfirmation(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	addr := startAssigner(t)
	if code, out := slicerd(t, "job", "set", "--addr", addr, "--max-redundancy", "2", "kv"); code != 0 {
		t.Fatalf("job set: exit %d\n%s", code, out)
	}

	// The test's stdin is not a terminal.
	code, out := slicerd(t, "job", "delete", "--addr", addr, "kv")
	if code != 2 || !strings.Contains(out, "refusing to delete job kv without confirmation") || !strings.Contains(out, "slicerd job delete --yes kv") {
		t.Errorf("job delete without --yes: exit %d, output:\n%s\nwant exit 2 and a refusal naming --yes", code, out)
	}
	if code, out := slicerd(t, "job", "get", "--addr", addr, "kv"); code != 0 {
		t.Fatalf("the refused deletion deleted the job: job get exit %d\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--yes"}, 2, "job delete needs exactly one JOB argument"},
		{[]string{"--yes", "kv", "--addr"}, 2, "flag needs an argument: -addr (see 'slicerd job delete --help')"},
		{[]string{"--yes=maybe", "kv"}, 2, "invalid"},
		{[]string{"--yes", "Bad_Job!"}, 1, `job delete Bad_Job!: job name "Bad_Job!" has 'B' at byte 0`},
		{[]string{"--yes", "kv"}, 0, "deleted job kv (it was at generation 0)"},
		{[]string{"--yes", "kv"}, 1, `job delete kv: unknown job "kv"`},
	} {
		code, out := slicerd(t, append([]string{"job", "delete", "--addr", addr}, tc.args...)...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("job delete %v: exit %d, output:\n%s\nwant exit %d and %q", tc.args, code, out, tc.code, tc.want)
		}
	}
	if code, out := slicerd(t, "job", "get", "--addr", addr, "kv"); code != 1 || !strings.Contains(out, `job get kv: unknown job "kv"`) {
		t.Errorf("job get after job delete: exit %d, output:\n%s\nwant exit 1 and the unknown job", code, out)
	}
}
