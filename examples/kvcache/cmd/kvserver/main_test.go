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
		{[]string{"-gossip-profile", "wan"}, "invalid -gossip-profile"},
		{[]string{"-log-level", "loud"}, "invalid -log-level"},
		{[]string{"-load-window", "0s"}, "invalid -load-window"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"-nope"}, "flag provided but not defined"},
		{[]string{"-task", "bad name"}, "kvserver:"},
		{[]string{"-join", ""}, "nothing to join"},
		{[]string{"-cache-file", "/nonexistent-dir/kv-0.cache"}, "cache file"},
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
