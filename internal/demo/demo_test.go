package demo

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/slicerd/slicerd/internal/testlog"
	"github.com/slicerd/slicerd/internal/testwait"
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
	var out, logs bytes.Buffer
	opts := DefaultOptions()
	opts.Once = true
	opts.RPCAddr, opts.GossipAddr, opts.GossipProfile = "127.0.0.1:0", "127.0.0.1:0", "local"
	opts.UIAddr = "127.0.0.1:0"
	opts.Step, opts.Keys = time.Second, 300
	opts.RebalanceDelay, opts.StartupGrace = 100*time.Millisecond, 300*time.Millisecond
	opts.Command = "go run ."
	opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts.QuietClients = true
	err := Run(context.Background(), opts, &out)
	t.Logf("output:\n%s", out.String())
	if logs.Len() > 0 {
		t.Logf("logs:\n%s", logs.String())
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	text := out.String()
	for _, want := range []string{"go run . job watch --addr 127.0.0.1:", "grpcurl -plaintext 127.0.0.1:",
		"/slicer.v1.JobService/GetJob", "Web UI (read-only): http://127.0.0.1:", "/ui/?job=kv\n", "== stopping kv-1", "== starting kv-3", "wrote 300 keys", "== stopped cleanly"} {
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

func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatalf("DefaultOptions: %v", err)
	}
	for _, tc := range []struct {
		change func(*Options)
		flag   string
	}{
		{func(o *Options) { o.Tasks = 1 }, "--tasks"},
		{func(o *Options) { o.Keys = 0 }, "--keys"},
		{func(o *Options) { o.Step = 0 }, "--step"},
		{func(o *Options) { o.GossipProfile = "wan" }, "--gossip-profile"},
	} {
		o := DefaultOptions()
		tc.change(&o)
		err := o.Validate()
		if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("Validate: %v; want ErrOptions naming %s", err, tc.flag)
		}
		// Run refuses the same options before starting anything.
		if err := Run(context.Background(), o, io.Discard); !errors.Is(err, ErrOptions) {
			t.Errorf("Run: %v; want ErrOptions naming %s", err, tc.flag)
		}
	}
}

// With --metrics-addr the demo serves slicerd's, the tasks' and the
// client's metrics with live values, on a port of their own or on the web
// UI's.
func TestDemoMetrics(t *testing.T) {
	t.Run("own port", func(t *testing.T) { testDemoMetrics(t, "") })
	t.Run("the UI's port", func(t *testing.T) { testDemoMetrics(t, "127.0.0.1:0") })
}

func testDemoMetrics(t *testing.T, uiAddr string) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var out testlog.Buffer
	opts := DefaultOptions()
	opts.RPCAddr, opts.GossipAddr, opts.GossipProfile = "127.0.0.1:0", "127.0.0.1:0", "local"
	opts.MetricsAddr, opts.UIAddr = "127.0.0.1:0", uiAddr
	opts.Step, opts.Keys = time.Hour, 100
	opts.RebalanceDelay, opts.StartupGrace = 100*time.Millisecond, 300*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts, &out) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	urlRE := regexp.MustCompile(`metrics (http://\S+/metrics)`)
	var url string
	testwait.Until(t, 60*time.Second, "the demo to print its metrics URL and the keys written", func() bool {
		m := urlRE.FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return url != "" && strings.Contains(out.String(), "wrote 100 keys")
	})
	want := []string{"slicerd_job_imbalance_ratio{job=\"kv\"}", "slicerd_job_task_slices{job=\"kv\",task=\"kv-0\"}",
		"slicerd_assigner_decisions_total{cause=", "slicerd_distributor_subscribers{job=\"kv\"}", "slicerd_clerk_lookups_total{job=\"kv\"}",
		"slicerd_slicelet_requests_total{job=\"kv\",task=\"kv-0\"}", "slicerd_gossip_members{state=\"alive\"}", "slicerd_store_commit_duration_seconds_count"}
	var body string
	testwait.Until(t, 60*time.Second, "every metric with a value", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	})
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "slicerd_clerk_lookups_total") || strings.HasPrefix(line, "slicerd_job_imbalance_ratio") {
			t.Log(line)
			if f := strings.Fields(line); f[len(f)-1] == "0" {
				t.Errorf("%s: want a live value", line)
			}
		}
	}
}
