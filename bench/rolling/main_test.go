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
		{[]string{"-tasks", "1"}, "-tasks 1"},
		{[]string{"-keys", "0"}, "-keys 0"},
		{[]string{"-exponent", "1"}, "-exponent 1"},
		{[]string{"-rate", "0"}, "-rate 0"},
		{[]string{"-workers", "0"}, "-workers 0"},
		{[]string{"-pause", "-1s"}, "-pause -1s"},
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
	if code := run([]string{"-h"}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "usage: go run ./bench/rolling") {
		t.Errorf("-h: exit %d, stderr %q", code, errOut.String())
	}
}
