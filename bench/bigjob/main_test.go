package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/slicerd/slicerd/bench/internal/benchtest"
)

func TestRejectsBadFlags(t *testing.T) {
	benchtest.Refuses(t, run, []benchtest.Refused{
		{Args: []string{"-tasks", "1"}, Want: "-tasks 1"},
		{Args: []string{"-slices-per-task", "0"}, Want: "-slices-per-task 0"},
		{Args: []string{"-ttl", "10ms"}, Want: "-ttl"},
		{Args: []string{"-rebalances", "0"}, Want: "-rebalances 0"},
		{Args: []string{"extra"}, Want: "unexpected argument"},
		{Args: []string{"-nope"}, Want: "flag provided but not defined"},
	})
}

func TestHelpExitsZero(t *testing.T) { benchtest.Helps(t, run, "--help", "-slices-per-task") }

// The harness against the real slicerd binary, with a job just large
// enough to be stored in pieces (60,000 slices, about 600 KB): every
// generation reaches the Backup's subscriber, the failover waits for the
// lease and loads the job, and a restarted Backup loads it again.
func TestBigJobThroughTheBackup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts slicerd")
	}
	var out, errs strings.Builder
	if code := run([]string{"-tasks", "600", "-slices-per-task", "100", "-rebalances", "2", "-ttl", "2s", "-json"}, &out, &errs); code != 0 {
		t.Fatalf("harness exited %d:\n%s\n%s", code, out.String(), errs.String())
	}
	var rep report
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	if len(rep.Steps) != 4 || rep.FirstLoadMS <= 0 {
		t.Fatalf("report %+v: want four steps and a restarted Backup's load", rep)
	}
	for i, s := range rep.Steps {
		if s.Generation != uint64(i+1) || s.Bytes <= 512<<10 || s.CommitMS <= 0 || s.BackupMS <= 0 {
			t.Errorf("step %+v: want generation %d, stored in pieces, committed and at the subscriber", s, i+1)
		}
	}
	if fo := rep.Steps[3]; fo.WaitMS <= 0 || fo.LoadMS <= 0 || fo.Churn <= 0 {
		t.Errorf("failover %+v: want a wait for the lease, a load, and the dead task's keys moved", fo)
	}
}
