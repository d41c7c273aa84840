package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slicerd/slicerd/sim"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(append([]string{"slicerd"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestTraceGenerateAndSimulate(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	if code, _, stderr := runCLI(t, "trace", "generate", "--workload", "failures", "--windows", "12", "--seed", "5", "--tasks", "4", "--out", trace); code != 0 {
		t.Fatalf("trace generate: exit %d: %s", code, stderr)
	}
	// Without --out the same trace goes to stdout.
	code, stdout, stderr := runCLI(t, "trace", "generate", "--workload", "failures", "--windows", "12", "--seed", "5", "--tasks", "4")
	if want, _ := os.ReadFile(trace); code != 0 || stdout != string(want) {
		t.Fatalf("trace generate to stdout: exit %d, %d bytes vs %d in --out: %s", code, len(stdout), len(want), stderr)
	}

	results := filepath.Join(dir, "results.jsonl")
	for _, algo := range []string{"weighted-move", "static", "consistent-hash"} {
		code, stdout, stderr := runCLI(t, "simulate", "--trace", trace, "--algo", algo, "--min-redundancy", "1", "--max-redundancy", "2")
		if code != 0 {
			t.Fatalf("simulate --algo %s: exit %d: %s", algo, code, stderr)
		}
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if len(lines) != 13 {
			t.Fatalf("simulate --algo %s: %d lines, want 12 windows and a summary", algo, len(lines))
		}
		var w sim.WindowResult
		if err := json.Unmarshal([]byte(lines[0]), &w); err != nil || w.Generation != 1 || len(w.Assignment) == 0 {
			t.Errorf("first line %q: %v", lines[0], err)
		}
		var s sim.Summary
		if err := json.Unmarshal([]byte(lines[12]), &s); err != nil || !s.Summary || s.Algorithm != algo || s.Windows != 12 || s.MeanImbalance < 1 {
			t.Errorf("summary %q: %v", lines[12], err)
		}
	}
	// --capacity: utilisation is measured with it.
	code, stdout, stderr = runCLI(t, "simulate", "--trace", trace, "--capacity", "t0=2,t1=0.5")
	if code != 0 || !strings.Contains(stdout, `"summary":true`) {
		t.Fatalf("simulate --capacity: exit %d: %s", code, stderr)
	}
	// --bytes and --memory: every window reports the fullest task's use
	// of its limit, and none passes it.
	withBytes := filepath.Join(t.TempDir(), "bytes.jsonl")
	if code, _, stderr := runCLI(t, "trace", "generate", "--workload", "power-law", "--windows", "6", "--bytes", "65536", "--out", withBytes); code != 0 {
		t.Fatalf("trace generate --bytes: exit %d: %s", code, stderr)
	}
	code, stdout, stderr = runCLI(t, "simulate", "--trace", withBytes, "--max-redundancy", "4", "--memory", "*=1e6")
	var mem sim.Summary
	if lines := strings.Split(strings.TrimSpace(stdout), "\n"); code != 0 || json.Unmarshal([]byte(lines[len(lines)-1]), &mem) != nil {
		t.Fatalf("simulate --memory: exit %d: %s", code, stderr)
	}
	if mem.MaxMemoryUse <= 0.5 || mem.MaxMemoryUse > 1 || mem.WindowsOverLimit != 0 {
		t.Errorf("simulate --memory: max memory use %v, %d windows over the limit; want (0.5, 1] and none", mem.MaxMemoryUse, mem.WindowsOverLimit)
	}
	code, stdout, stderr = runCLI(t, "simulate", "--trace", trace, "--out", results)
	if code != 0 || stdout != "" {
		t.Fatalf("simulate --out: exit %d, stdout %q: %s", code, stdout, stderr)
	}
	if b, err := os.ReadFile(results); err != nil || !strings.Contains(string(b), `"summary":true,"algorithm":"weighted-move"`) {
		t.Fatalf("results file: %v\n%s", err, b)
	}
}

func TestSimulateErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jsonl")
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(good, []byte("{\"window\":0,\"tasks\":[\"a\",\"b\"]}\n{\"window\":0,\"key\":\"k\",\"load\":1}\n"), 0o644)
	os.WriteFile(bad, []byte("{\"window\":0,\"tasks\":[\"a\",\"b\"]}\n{\"window\":0,\"key\":\"k\",\"load\":1}\n{\"window\":1,\"key\":\"k\",\"lode\":1}\n"), 0o644)
	out := filepath.Join(dir, "out.jsonl")
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no trace flag", []string{"simulate"}, 2, "needs --trace"},
		{"unknown algo", []string{"simulate", "--trace", good, "--algo", "round-robin"}, 2, "invalid --algo"},
		{"unknown flag", []string{"simulate", "--trace", good, "--bogus"}, 2, "flag provided but not defined"},
		{"zero redundancy", []string{"simulate", "--trace", good, "--min-redundancy", "0"}, 2, "min redundancy"},
		{"max below min", []string{"simulate", "--trace", good, "--min-redundancy", "2", "--max-redundancy", "1"}, 2, "below min"},
		{"bad job", []string{"simulate", "--trace", good, "--job", "Bad"}, 2, "invalid --job"},
		{"argument", []string{"simulate", "--trace", good, "extra"}, 2, "unexpected argument"},
		{"missing file", []string{"simulate", "--trace", filepath.Join(dir, "none.jsonl")}, 1, "cannot read the trace"},
		{"malformed trace", []string{"simulate", "--trace", bad, "--out", out}, 1, `line 3: json: unknown field "lode"`},
		{"capacity not NAME=C", []string{"simulate", "--trace", good, "--capacity", "a2"}, 2, `invalid --capacity: "a2" is not NAME=CAPACITY`},
		{"capacity not a number", []string{"simulate", "--trace", good, "--capacity", "a=two"}, 2, `capacity of "a": "two" is not a number`},
		{"capacity out of bounds", []string{"simulate", "--trace", good, "--capacity", "a=2,b=5000"}, 2, "between 0.001 and 1000"},
		{"capacity twice", []string{"simulate", "--trace", good, "--capacity", "a=2,a=3"}, 2, `task "a" is given twice`},
		{"capacity bad name", []string{"simulate", "--trace", good, "--capacity", "-a=2"}, 2, "invalid --capacity"},
		{"memory not NAME=B", []string{"simulate", "--trace", good, "--memory", "1e6"}, 2, `invalid --memory: "1e6" is not NAME=BYTES`},
		{"memory not a number", []string{"simulate", "--trace", good, "--memory", "*=lots"}, 2, `memory limit of "*": "lots" is not a number of bytes`},
		{"memory out of bounds", []string{"simulate", "--trace", good, "--memory", "a=1e20"}, 2, "give a limit in bytes between 1 and"},
		{"memory twice", []string{"simulate", "--trace", good, "--memory", "*=1,*=2"}, 2, `task "*" is given twice`},
		{"generate bytes negative", []string{"trace", "generate", "--workload", "zipf", "--bytes", "-1"}, 2, "bytes per key; use 0 (no state)"},
		{"generate without workload", []string{"trace", "generate"}, 2, "needs --workload"},
		{"generate unknown workload", []string{"trace", "generate", "--workload", "spiky"}, 2, `unknown workload "spiky"`},
		{"generate zero windows", []string{"trace", "generate", "--workload", "zipf", "--windows", "0"}, 2, "0 windows"},
		{"generate zero tasks", []string{"trace", "generate", "--workload", "zipf", "--tasks", "0"}, 2, "0 tasks"},
		{"generate bad flag", []string{"trace", "generate", "--windows", "many"}, 2, "invalid value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.msg) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", code, stderr, tc.code, tc.msg)
			}
		})
	}
	// A failed run leaves no partial --out file behind.
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("--out exists after a failed run: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}
