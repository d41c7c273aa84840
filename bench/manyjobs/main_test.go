package main

import (
	"testing"

	"github.com/slicerd/slicerd/bench/internal/benchtest"
)

func TestRejectsBadFlags(t *testing.T) {
	benchtest.Refuses(t, run, []benchtest.Refused{
		{Args: []string{"-jobs", "0"}, Want: "-jobs 0"},
		{Args: []string{"-jobs", "100001"}, Want: "-jobs 100001"},
		{Args: []string{"-assigners", "1"}, Want: "-assigners 1"},
		{Args: []string{"-rest", "0s"}, Want: "-rest and -timeout"},
		{Args: []string{"extra"}, Want: "unexpected argument"},
		{Args: []string{"-nope"}, Want: "flag provided but not defined"},
	})
}

func TestHelpExitsZero(t *testing.T) { benchtest.Helps(t, run, "--help", "-jobs") }
