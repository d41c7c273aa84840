package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slicerd/slicerd/bench/internal/benchproc"
)

// Bad flags are refused with a message and exit status 2, before any
// process starts.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-tasks", "2"}, {"-clients", "0"}, {"-hot", "5", "-keys", "3"}, {"-hot-share", "1.5"},
		{"-rate", "0"}, {"-duration", "0s"}, {"-lease-ttl", "-1s"}, {"extra"},
	} {
		var out bytes.Buffer
		if code := run(append(args, "-slicerd", "/nonexistent", "-kvserver", "/nonexistent"), &out, &out); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, out.String())
		}
	}
}

// The report reads the Assigners' guard moves and the tasks' records.
func TestReadLogs(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "a.log")
	os.WriteFile(log, []byte(strings.Join([]string{
		`{"msg":"guard moved","from":0,"to":1,"recall_period":1000,"took":2000}`,
		`{"msg":"guard moved","from":1,"to":2,"recall_period":5000000,"took":9000000}`,
		`{"time":"2026-01-01T00:00:01Z","msg":"took over job as its preferred assigner"}`,
	}, "\n")), 0o644)
	recalls, moves := guardMoves(log)
	if len(recalls) != 1 || recalls[0] != 5 || moves[0] != 9 {
		t.Errorf("guardMoves = %v %v, want one move: 5 ms recall, 9 ms whole", recalls, moves)
	}
	if got := leaseHolder(filepath.Join(dir, "none.log"), log); got != log {
		t.Errorf("leaseHolder = %q", got)
	}
}

// An unsatisfied request falls in the fault window its life overlaps,
// extended by the settle time; the others are counted outside.
func TestAttribute(t *testing.T) {
	s := time.Second
	var r report
	r.attribute([]window{{Name: "kill", Start: 10 * s, End: 10 * s}, {Name: "stop", Start: 30 * s, End: 34 * s}},
		[]benchproc.Outcome{{At: 6 * s}, {At: 8 * s}, {At: 15 * s}, {At: 27 * s}, {At: 40 * s}, {At: 44 * s}, {At: 45 * s}}, 3*s, 10*s)
	if r.Windows[0].Unsatisfied != 2 || r.Windows[1].Unsatisfied != 3 || r.OutsideCount != 2 {
		t.Errorf("windows %+v, outside %v", r.Windows, r.Outside)
	}
	if r.Outside[0].At != 6*s || r.Outside[1].At != 45*s {
		t.Errorf("outside %v, want the requests at 6 s and 45 s", r.Outside)
	}
}
