package main

import (
	"testing"

	"github.com/slicerd/slicerd/bench/internal/benchtest"
)

func TestRejectsBadFlags(t *testing.T) {
	benchtest.Refuses(t, run, []benchtest.Refused{
		{Args: []string{"-tasks", "1"}, Want: "-tasks 1"},
		{Args: []string{"-keys", "0"}, Want: "-keys 0"},
		{Args: []string{"-exponent", "1"}, Want: "-exponent 1"},
		{Args: []string{"-rate", "0"}, Want: "-rate 0"},
		{Args: []string{"-workers", "0"}, Want: "-workers 0"},
		{Args: []string{"-pause", "-1s"}, Want: "-pause -1s"},
		{Args: []string{"extra"}, Want: "unexpected argument"},
		{Args: []string{"-nope"}, Want: "flag provided but not defined"},
	})
}

func TestHelpExitsZero(t *testing.T) { benchtest.Helps(t, run, "-h", "usage: go run ./bench/rolling") }
