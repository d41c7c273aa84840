package cli

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func TestFlagsFirst(t *testing.T) {
	app := NewApp("", io.Discard, io.Discard, JobCommand(), TaskCommand(), KeyringCommand())
	for _, tc := range []struct{ in, want string }{
		{"job get kv --addr X", "job get --addr X kv"},
		{"job get --addr X kv", "job get --addr X kv"},
		{"job get kv --addr=X", "job get --addr=X kv"},
		{"job set kv --min-redundancy 2 --max-redundancy 3", "job set --min-redundancy 2 --max-redundancy 3 kv"},
		{"job why kv k --hex --addr X", "job why --hex --addr X kv k"}, // --hex takes no value
		{"job why kv -- -k --addr", "job why -- kv -k --addr"},         // after --, arguments
		{"task drain kv kv-0 --wait=false", "task drain --wait=false kv kv-0"},
		{"--log-level debug job list extra --addr X", "--log-level debug job list --addr X extra"},
		{"job get kv --addr", "job get --addr"}, // the flag's error, not a wrong JOB
		{"job sett kv --addr X", "job sett kv --addr X"},
		{"jobs list --addr X", "jobs list --addr X"},
		{"job get kv --addr X --generate-bash-completion", "job get --addr X kv --generate-bash-completion"},
	} {
		got := flagsFirst(app, append([]string{"slicerd"}, strings.Fields(tc.in)...))
		if want := append([]string{"slicerd"}, strings.Fields(tc.want)...); !slices.Equal(got, want) {
			t.Errorf("flagsFirst(%s) = %q; want %q", tc.in, got[1:], want[1:])
		}
	}
}

// Every command takes its flags after its arguments as well as before;
// job list, which takes no arguments, refuses one instead of ignoring it.
func TestFlagsAfterArguments(t *testing.T) {
	addr := startAssigner(t)
	if code, out := slicerd(t, "job", "set", "kv", "--addr", addr, "--min-redundancy", "1", "--max-redundancy", "2"); code != 0 || !strings.Contains(out, "max redundancy  2") {
		t.Fatalf("job set kv --addr ...: exit %d:\n%s", code, out)
	}
	if code, out := slicerd(t, "job", "get", "kv", "--addr", addr); code != 0 || !strings.Contains(out, "max redundancy  2") {
		t.Errorf("job get kv --addr ...: exit %d:\n%s", code, out)
	}
	if code, out := slicerd(t, "job", "list", "--addr", addr); code != 0 || !strings.Contains(out, "\nkv ") {
		t.Errorf("job list --addr ...: exit %d:\n%s", code, out)
	}
	// Before, 'extra' stopped flag parsing and job list asked 127.0.0.1:7070.
	code, out := slicerd(t, "job", "list", "extra", "--addr", addr)
	if want := `job list takes no arguments, got "extra"`; code != 2 || !strings.Contains(out, want) {
		t.Errorf("job list extra --addr ...: exit %d:\n%s\nwant exit 2 and %q", code, out, want)
	}
}
