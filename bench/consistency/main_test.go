package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
