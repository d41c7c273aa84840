//go:build linux && attack

package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// These run the harness against the real slicerd binary, built from this
// module, as acceptance tests of the resource limits:
//
//	go test -tags attack -run Attack -v -timeout 20m ./bench/slowsub/

// TestMain runs the harness itself when the test binary is started as a
// holder process.
func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// step is one line of the harness's table.
type step struct {
	name     string
	rss, hwm float64 // MB
	health   string
	gen      uint64
}

// steps parses the harness's table and returns the rest of its lines.
func steps(t *testing.T, out string) ([]step, []string) {
	t.Helper()
	var ss []step
	var rest []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] == "step" {
			rest = append(rest, line)
			continue
		}
		n := len(f)
		rss, err1 := strconv.ParseFloat(f[n-5], 64)
		hwm, err2 := strconv.ParseFloat(f[n-4], 64)
		gen, err3 := strconv.ParseUint(f[n-1], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			rest = append(rest, line)
			continue
		}
		ss = append(ss, step{name: strings.Join(f[:n-5], " "), rss: rss, hwm: hwm, health: f[n-2], gen: gen})
	}
	return ss, rest
}

// TestAttackSlowSubscribers: 5,000 stalled subscribers of a 10,000-slice
// assignment stay within the memory bound of docs/operations.md (Slow
// subscribers), health stays SERVING, a normal subscriber gets every
// generation, and every stalled stream is reset after the write timeout.
// The subscribers accept gzip in the second run, as Connect and gRPC
// clients do by default.
func TestAttackSlowSubscribers(t *testing.T) {
	t.Run("identity", func(t *testing.T) { attackSlowSubscribers(t) })
	t.Run("gzip", func(t *testing.T) { attackSlowSubscribers(t, "-gzip") })
}

func attackSlowSubscribers(t *testing.T, extra ...string) {
	const subscribers, generations = 5000, 4
	var out, errs bytes.Buffer
	if code := run(append([]string{"-subscribers", strconv.Itoa(subscribers), "-generations", strconv.Itoa(generations),
		"-slicerd-flag=--stream-write-timeout=20s", "-hold", "30s"}, extra...), &out, &errs); code != 0 {
		t.Fatalf("harness exited %d:\n%s\n%s", code, out.String(), errs.String())
	}
	t.Logf("\n%s", out.String())
	ss, rest := steps(t, out.String())
	if len(ss) != generations+3 {
		t.Fatalf("%d steps in the output, want %d", len(ss), generations+3)
	}
	// The bound: baseline + send budget (64 MiB) + one 8 MiB shared
	// encoding per generation for each of two roles + ~55 KB per
	// connection, with room for the garbage collector's slack.
	bound := ss[0].rss + 64*1.05 + float64(generations+2)*2*8.4 + subscribers*0.1
	for i, s := range ss {
		if s.health != "SERVING" {
			t.Errorf("step %q: health %s", s.name, s.health)
		}
		if s.hwm > bound {
			t.Errorf("step %q: peak RSS %.1f MB exceeds the bound %.1f MB", s.name, s.hwm, bound)
		}
		if i >= 2 && i < 2+generations && s.gen <= ss[i-1].gen {
			t.Errorf("step %q: the normal subscriber holds generation %d, no newer than before (%d)", s.name, s.gen, ss[i-1].gen)
		}
	}
	want := fmt.Sprintf("stalled streams reset by slicerd: %d of %d (0 still open)", subscribers, subscribers)
	if !strings.Contains(strings.Join(rest, "\n"), want) {
		t.Errorf("want %q in the output", want)
	}
}

// TestAttackIdleConnections: 20,000 idle HTTP/2 connections from three
// addresses are capped per address and closed at the idle timeout, memory
// stays bounded, health stays SERVING and a new task still joins and gets
// slices (the harness fails otherwise).
func TestAttackIdleConnections(t *testing.T) {
	const conns = 20000
	var out, errs bytes.Buffer
	if code := run([]string{"-mode", "idle", "-conns", strconv.Itoa(conns), "-per-ip", "9000",
		"-slicerd-flag=--idle-timeout=20s", "-hold", "30s"}, &out, &errs); code != 0 {
		t.Fatalf("harness exited %d:\n%s\n%s", code, out.String(), errs.String())
	}
	t.Logf("\n%s", out.String())
	ss, rest := steps(t, out.String())
	if len(ss) != 4 {
		t.Fatalf("%d steps in the output, want 4", len(ss))
	}
	// At most 3 × 1,024 connections kept, at ~25 KB each, with slack.
	bound := ss[0].rss + 3*1024*0.05
	for _, s := range ss {
		if s.health != "SERVING" {
			t.Errorf("step %q: health %s", s.name, s.health)
		}
		if s.hwm > bound {
			t.Errorf("step %q: peak RSS %.1f MB exceeds the bound %.1f MB", s.name, s.hwm, bound)
		}
	}
	if ss[2].gen <= ss[1].gen {
		t.Errorf("no new generation for the task that joined during the flood")
	}
	want := fmt.Sprintf("idle connections closed by slicerd: %d of %d", conns, conns)
	if !strings.Contains(strings.Join(rest, "\n"), want) {
		t.Errorf("want %q in the output", want)
	}
}
