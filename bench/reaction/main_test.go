package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/slicerd/slicerd/bench/loadshift"
)

func TestRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-tasks", "0"}, "-tasks 0"},
		{[]string{"-shifts", "0"}, "-shifts 0"},
		{[]string{"-period", "3s"}, "not longer than"},
		{[]string{"-threshold", "0.5"}, "threshold"},
		{[]string{"-load-window", "0s"}, "load window"},
		{[]string{"-tasks", "4", "-max-redundancy", "5"}, "-max-redundancy 5"},
		{[]string{"-rate", "0"}, "rate"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"-nope"}, "flag provided but not defined"},
	} {
		var out, errOut bytes.Buffer
		if code := run(tc.args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr: %s", tc.args, code, errOut.String())
		}
		if !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, errOut.String(), tc.want)
		}
		if out.Len() != 0 {
			t.Errorf("%v: wrote %q to stdout", tc.args, out.String())
		}
	}
}

func TestHelpExitsZero(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--help"}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "-period") {
		t.Errorf("--help: exit %d, output %q", code, errOut.String())
	}
}

func TestMedianCountsUnbalancedAsSlowest(t *testing.T) {
	mk := func(secs ...float64) *report {
		r := &report{}
		for _, s := range secs {
			r.Shifts = append(r.Shifts, loadshiftResult(s))
		}
		r.median()
		return r
	}
	if r := mk(9, -1, 5); r.MedianSeconds == nil || *r.MedianSeconds != 9 || r.Balanced != 2 {
		t.Errorf("median of 9, never, 5 = %v (balanced %d), want 9 and 2", r.MedianSeconds, r.Balanced)
	}
	if r := mk(9, -1, -1); r.MedianSeconds != nil {
		t.Errorf("median with most never balanced = %v, want none", *r.MedianSeconds)
	}
	if r := mk(4, 8); r.MedianSeconds == nil || *r.MedianSeconds != 6 {
		t.Errorf("median of 4, 8 = %v, want 6", r.MedianSeconds)
	}
}

// loadshiftResult is a shift balanced after secs, or never when secs < 0.
func loadshiftResult(secs float64) loadshift.ShiftResult {
	if secs < 0 {
		return loadshift.ShiftResult{}
	}
	return loadshift.ShiftResult{Balanced: true, ReactionSeconds: secs}
}
