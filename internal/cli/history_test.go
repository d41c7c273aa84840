package cli

import (
	"strings"
	"testing"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
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
		{[]string{"job", "why", "kv", "zz", "--hex"}, 2, `invalid KEY "zz" for --hex`},
		{[]string{"job", "why", "kv", "k", "extra"}, 2, "job why needs two arguments, JOB and KEY"},
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

// The columns of 'job history' line up: every row's cells start where their
// heading does, whatever the lengths of the values, with and without the
// moves printed between the rows.
func TestPrintHistoryAligns(t *testing.T) {
	ds := []*slicerv1.Decision{
		{Generation: 12345, TimeUnixNano: 1_700_000_000_123_000_000, Cause: "make-before-break", Churn: 1, ImbalanceBefore: 12.5, ImbalanceAfter: 1,
			Moves: []*slicerv1.DecisionMove{{Phase: "move", Kind: "reassign", Start: 1, End: 2, From: "a", To: "b", Reason: "hot"}}, MovesOmitted: 1000, Detail: "x"},
		{Generation: 1, TimeUnixNano: 1_600_000_000_000_000_000, Cause: "initial", Churn: 0.001, ImbalanceBefore: 1, ImbalanceAfter: 1, Detail: "first"},
	}
	for _, moves := range []bool{false, true} {
		var out strings.Builder
		printHistory(&out, "kv", ds, moves)
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		header := lines[0]
		var rows []string
		for _, l := range lines[1:] {
			if !strings.HasPrefix(l, " ") {
				rows = append(rows, l)
			}
		}
		if len(rows) != 2 {
			t.Fatalf("moves %v: %d rows; want 2:\n%s", moves, len(rows), out.String())
		}
		// Left-aligned columns start under their heading; right-aligned
		// ones (CHURN, MOVES) end under it.
		for _, col := range []struct {
			heading string
			cells   [2]string
			right   bool
		}{
			{"TIME", [2]string{"2023-11-14T22:13:20.123Z", "2020-09-13T12:26:40.000Z"}, false},
			{"CAUSE", [2]string{"make-before-break", "initial"}, false},
			{"CHURN", [2]string{"100.00%", "0.10%"}, true},
			{"IMBALANCE", [2]string{"12.500 -> 1.000", "1.000 -> 1.000"}, false},
			{"MOVES", [2]string{"1001", "0"}, true},
			{"DETAIL", [2]string{"x", "first"}, false},
		} {
			at := strings.Index(header, col.heading)
			for i, row := range rows {
				want := at
				if col.right {
					want = at + len(col.heading) - len(col.cells[i])
				}
				if got := strings.Index(row[want:], col.cells[i]); got != 0 {
					t.Errorf("moves %v: row %d's %s %q is not aligned under its heading:\n%s", moves, i, col.heading, col.cells[i], out.String())
				}
			}
		}
	}
}
