package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestDemoRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct{ args, msg string }{
		{"--tasks 1", "--tasks must be at least 2"},
		{"--keys 0", "--keys must be at least 1"},
		{"--step 0s", "--step must be positive"},
		{"--gossip-profile wan", `invalid --gossip-profile "wan"`},
		{"--log-level loud", `invalid --log-level "loud"`},
		{"--rpc-addr localhost", `rpc address "localhost" is not host:port`},
		{"extra", `unexpected argument "extra"`},
	} {
		var out bytes.Buffer
		args := append([]string{"slicerd", "demo", "--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0"}, strings.Fields(tc.args)...)
		if code := run(args, &out, &out); code != 2 || !strings.Contains(out.String(), tc.msg) {
			t.Errorf("demo %s: exit %d, output %q; want exit 2 (usage error) and %q", tc.args, code, out.String(), tc.msg)
		}
	}
}

func TestSelfCommand(t *testing.T) {
	for arg0, want := range map[string]string{
		"/tmp/go-build1234567/b001/exe/slicerd":                          "go run .",
		`C:\Users\me\AppData\Local\Temp\go-build99\b001\exe\slicerd.exe`: "go run .",
		"/usr/local/bin/slicerd":                                         "slicerd",
		"./slicerd":                                                      "slicerd",
	} {
		if got := selfCommand(arg0); got != want {
			t.Errorf("selfCommand(%q) = %q; want %q", arg0, got, want)
		}
	}
}
