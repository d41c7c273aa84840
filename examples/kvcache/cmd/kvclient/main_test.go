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
		{[]string{"-keys", "-1"}, "-keys must not be negative"},
		{[]string{"-interval", "0s"}, "-interval must be positive"},
		{[]string{"-log-level", "loud"}, "invalid -log-level"},
		{[]string{"-job", "Bad Job"}, "kvclient:"},
		{[]string{"-distributor", ""}, "no server address"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"-cache-file", "/nonexistent-dir/kv.cache"}, "cache file"},
	} {
		var out, errOut bytes.Buffer
		if code := run(tc.args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr: %s", tc.args, code, errOut.String())
		}
		if !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, errOut.String(), tc.want)
		}
	}
}
