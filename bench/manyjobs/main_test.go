package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-jobs", "0"}, "-jobs 0"},
		{[]string{"-jobs", "100001"}, "-jobs 100001"},
		{[]string{"-assigners", "1"}, "-assigners 1"},
		{[]string{"-rest", "0s"}, "-rest and -timeout"},
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
	if code := run([]string{"--help"}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "-jobs") {
		t.Errorf("--help: exit %d, output %q", code, errOut.String())
	}
}
