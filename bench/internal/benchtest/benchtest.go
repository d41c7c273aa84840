// Package benchtest holds the checks every harness under bench/ runs in
// its tests: that its command line refuses what it must, saying why, and
// that its help exits cleanly. It is for tests only.
package benchtest

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// Run is a harness's entry point: it parses args, runs, and returns the
// process's exit code.
type Run func(args []string, stdout, stderr io.Writer) int

// Refused is a command line the harness must refuse, and words its error
// must contain.
type Refused struct {
	Args []string
	Want string
}

// Refuses checks that run exits 2 on each of cases, with the case's words
// on stderr and nothing on stdout.
func Refuses(t *testing.T, run Run, cases []Refused) {
	t.Helper()
	for _, tc := range cases {
		var out, errOut bytes.Buffer
		if code := run(tc.Args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr: %s", tc.Args, code, errOut.String())
		}
		if !strings.Contains(errOut.String(), tc.Want) {
			t.Errorf("%v: stderr %q lacks %q", tc.Args, errOut.String(), tc.Want)
		}
		if out.Len() != 0 {
			t.Errorf("%v: wrote %q to stdout", tc.Args, out.String())
		}
	}
}

// Helps checks that run exits 0 on flag, writing want to stderr.
func Helps(t *testing.T, run Run, flag, want string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run([]string{flag}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), want) {
		t.Errorf("%s: exit %d, stderr %q; want 0 and %q", flag, code, errOut.String(), want)
	}
}
