package main

import (
	"testing"

	"github.com/slicerd/slicerd/bench/internal/benchtest"
	"github.com/slicerd/slicerd/bench/loadshift"
)

func TestRejectsBadFlags(t *testing.T) {
	benchtest.Refuses(t, run, []benchtest.Refused{
		{Args: []string{"-tasks", "0"}, Want: "-tasks 0"},
		{Args: []string{"-shifts", "0"}, Want: "-shifts 0"},
		{Args: []string{"-period", "3s"}, Want: "not longer than"},
		{Args: []string{"-threshold", "0.5"}, Want: "threshold"},
		{Args: []string{"-load-window", "0s"}, Want: "load window"},
		{Args: []string{"-tasks", "4", "-max-redundancy", "5"}, Want: "-max-redundancy 5"},
		{Args: []string{"-rate", "0"}, Want: "rate"},
		{Args: []string{"extra"}, Want: "unexpected argument"},
		{Args: []string{"-nope"}, Want: "flag provided but not defined"},
	})
}

func TestHelpExitsZero(t *testing.T) { benchtest.Helps(t, run, "--help", "-period") }

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
