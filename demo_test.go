package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// demoBlock is one assignment as the demo printed it.
type demoBlock struct {
	generation uint64
	tasks      []string
	percent    float64 // share of the key space, summed over tasks
	after      string  // the last "==" step line before it
}

var (
	demoHeaderRE = regexp.MustCompile(`^job kv generation (\d+): \d+ slices over (\d+) tasks$`)
	demoTaskRE   = regexp.MustCompile(`^  (kv-\d+)\s+\S+\s+([\d.]+)% of keys in \d+ slices$`)
)

func parseDemo(t *testing.T, out string) []demoBlock {
	t.Helper()
	var blocks []demoBlock
	step := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "== ") {
			step = line
			continue
		}
		if m := demoHeaderRE.FindStringSubmatch(line); m != nil {
			gen, _ := strconv.ParseUint(m[1], 10, 64)
			blocks = append(blocks, demoBlock{generation: gen, after: step})
			continue
		}
		if m := demoTaskRE.FindStringSubmatch(line); m != nil && len(blocks) > 0 {
			b := &blocks[len(blocks)-1]
			b.tasks = append(b.tasks, m[1])
			pct, _ := strconv.ParseFloat(m[2], 64)
			b.percent += pct
		}
	}
	return blocks
}

func TestDemoOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var out, errOut bytes.Buffer
	code := run([]string{"slicerd", "demo", "--once",
		"--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local",
		"--step", "1s", "--keys", "300", "--rebalance-delay", "100ms", "--startup-grace", "300ms",
	}, &out, &errOut)
	t.Logf("stdout:\n%s", out.String())
	if errOut.Len() > 0 {
		t.Logf("stderr:\n%s", errOut.String())
	}
	if code != 0 {
		t.Fatalf("demo exited %d; want 0", code)
	}
	text := out.String()
	for _, want := range []string{"grpcurl -plaintext", "== stopping kv-1", "== starting kv-3", "wrote 300 keys", "== stopped cleanly"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	blocks := parseDemo(t, text)
	if len(blocks) < 3 {
		t.Fatalf("parsed %d assignments; want at least the first, one after the stop and one after the join", len(blocks))
	}
	var gens []uint64
	live := map[string]bool{"kv-0": true, "kv-1": true, "kv-2": true}
	sawWithout, sawJoined := false, false
	for _, b := range blocks {
		gens = append(gens, b.generation)
		switch {
		case strings.HasPrefix(b.after, "== stopping kv-1"):
			delete(live, "kv-1")
		case strings.HasPrefix(b.after, "== starting kv-3"):
			delete(live, "kv-1")
			live["kv-3"] = true
		}
		// With one task per slice, the shares add up to the whole key space.
		if b.percent < 99.9 || b.percent > 100.1 {
			t.Errorf("generation %d: shares add up to %.2f%%; want 100%%", b.generation, b.percent)
		}
		if b.after == "" {
			continue // before the script starts, tasks are still joining
		}
		for _, task := range b.tasks {
			if !live[task] {
				t.Errorf("generation %d (after %q) serves slices from %s, which is not running", b.generation, b.after, task)
			}
		}
		if strings.HasPrefix(b.after, "== stopping kv-1") && slices.Equal(b.tasks, []string{"kv-0", "kv-2"}) {
			sawWithout = true
		}
		if strings.HasPrefix(b.after, "== starting kv-3") && slices.Equal(b.tasks, []string{"kv-0", "kv-2", "kv-3"}) {
			sawJoined = true
		}
	}
	if !slices.IsSorted(gens) || len(slices.Compact(slices.Clone(gens))) != len(gens) {
		t.Errorf("generations printed out of order or twice: %v", gens)
	}
	if !sawWithout {
		t.Errorf("no assignment over exactly kv-0 and kv-2 after kv-1 stopped (live at the end: %v)", slices.Sorted(maps.Keys(live)))
	}
	if !sawJoined {
		t.Error("no assignment over kv-0, kv-2 and kv-3 after kv-3 started")
	}
	if !strings.Contains(text, "kv-1 → ") {
		t.Error("output shows no key moving away from kv-1")
	}
	if !strings.Contains(text, " → kv-3 ") {
		t.Error("output shows no key moving to kv-3")
	}
}

// TestDemoRejectsBadFlags runs each case in a child process: the CLI
// library exits the process on a usage error.
func TestDemoRejectsBadFlags(t *testing.T) {
	if args := os.Getenv("SLICERD_DEMO_TEST_ARGS"); args != "" {
		os.Exit(run(append([]string{"slicerd", "demo", "--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0"},
			strings.Fields(args)...), io.Discard, os.Stderr))
	}
	for _, args := range []string{"--tasks 1", "--keys 0", "--step 0s", "--gossip-profile wan", "--log-level loud", "extra"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDemoRejectsBadFlags$")
		cmd.Env = append(os.Environ(), "SLICERD_DEMO_TEST_ARGS="+args)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("demo %s: %v; want exit status 2 (usage error); output: %s", args, err, out)
		}
	}
}
