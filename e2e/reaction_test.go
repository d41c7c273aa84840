package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/bench/loadshift"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/internal/testwait"
)

// TestReactsToHotKeyShift runs slicerd and five kvserver processes that
// report load every 4 seconds, offers power-law load through a Clerk,
// shifts the hot keys once, and checks that slicerd brings max/mean task
// load back under 1.2. How long that takes is measured by bench/reaction,
// not here. The windows are long enough for an imbalance of 1.25 to stand
// out of the sampling noise at 500 requests a second: with 1 s windows a
// task reports about 100 requests, whose noise alone moves the measured
// imbalance by 10%, and slicerd rightly leaves such an imbalance alone
// (assign.SignificantGain).
func TestReactsToHotKeyShift(t *testing.T) {
	const tasks = 5
	node := startSlicerd(t, "slicerd-0", "--data-dir", t.TempDir(), "--rebalance-interval", "1s")
	if code, out := runSlicerd(t, "job", "set", "--addr", node.rpcAddr, "--min-redundancy", "1",
		"--max-redundancy", fmt.Sprint(tasks), "kv"); code != 0 {
		t.Fatalf("job set exited %d: %s", code, out)
	}
	for i := range tasks {
		startKVReporting(t, fmt.Sprintf("kv-%d", i), node.gossipAddr, "4s")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ck := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	testwait.Until(t, 30*time.Second, "an assignment over all tasks", func() bool {
		a := ck.Assignment()
		return a != nil && len(a.Tasks) == tasks
	})

	cfg := loadshift.DefaultConfig()
	cfg.Rate, cfg.Workers = 500, 16
	d, err := loadshift.NewDriver(cfg, ck, nil)
	if err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithCancel(ctx)
	ddone := make(chan error, 1)
	go func() { ddone <- d.Run(dctx) }()
	defer func() { dcancel(); <-ddone }()

	m := loadshift.DefaultMeasure()
	var trace []string
	m.OnSample = func(s loadshift.Sample) {
		trace = append(trace, fmt.Sprintf("%ds:%.2f/g%d", s.Seconds, s.Imbalance, s.Generation))
	}
	wctx, wcancel := context.WithTimeout(ctx, 45*time.Second)
	defer wcancel()
	if err := d.WaitBalanced(wctx, m); err != nil {
		t.Fatalf("load never balanced before the shift: %v; imbalance by second: %s", err, strings.Join(trace, " "))
	}
	trace = nil
	m.Period, m.StopWhenBalanced = 45*time.Second, true
	r, err := d.MeasureShift(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Balanced {
		t.Fatalf("imbalance stayed above %g for %v after the hot keys shifted (hot key %s, generation %d -> %d); imbalance by second: %s",
			m.Threshold, m.Period, r.HotKey, r.GenerationBefore, r.GenerationAfter, strings.Join(trace, " "))
	}
	answered, failed, dropped := d.Stats()
	t.Logf("balanced %v s after the shift (first imbalance %.2f, peak %.2f; generation %d -> %d; answered %d, failed %d, dropped %d)",
		r.ReactionSeconds, r.FirstImbalance, r.PeakImbalance, r.GenerationBefore, r.GenerationAfter, answered, failed, dropped)
	checkWhyLoadDecision(t, node.rpcAddr, r.HotKey)
}

// checkWhyLoadDecision finds, in 'job history --moves', the widest key
// range a load decision moved (the hot key's range, if a load decision
// moved it), picks an application key in it, and checks that 'job why'
// names that decision.
func checkWhyLoadDecision(t *testing.T, addr, hot string) {
	t.Helper()
	code, out := runSlicerd(t, "job", "history", "--addr", addr, "--moves", "--limit", "0", "kv")
	if code != 0 {
		t.Fatalf("job history exited %d: %s", code, out)
	}
	decision := regexp.MustCompile(`^(\d+) +\S+ +(\S+) `)
	move := regexp.MustCompile(`^ +move +(?:reassign|add-replica) +\[(0x[0-9a-f]+), (0x[0-9a-f]+)\) `)
	type moved struct {
		gen        string
		start, end uint64
	}
	var cur string // the load decision whose moves are being read
	var widest, hotMove moved
	for _, line := range strings.Split(out, "\n") {
		if m := decision.FindStringSubmatch(line); m != nil {
			cur = ""
			if m[2] == "load" {
				cur = m[1]
			}
			continue
		}
		if m := move.FindStringSubmatch(line); m != nil && cur != "" {
			s, _ := strconv.ParseUint(m[1], 0, 64)
			e, _ := strconv.ParseUint(m[2], 0, 64)
			if e-s > widest.end-widest.start {
				widest = moved{cur, s, e}
			}
			if h := assign.HashString(hot); s <= h && h < e && hotMove.gen == "" {
				hotMove = moved{cur, s, e}
			}
		}
	}
	if widest.gen == "" {
		t.Fatalf("job history shows no load decision that moved keys:\n%s", out)
	}
	pick, key := hotMove, hot
	if pick.gen == "" {
		pick, key = widest, ""
		for i := 0; i < 1<<22 && key == ""; i++ {
			if k := fmt.Sprintf("key-%d", i); pick.start <= assign.HashString(k) && assign.HashString(k) < pick.end {
				key = k
			}
		}
		if key == "" {
			t.Fatalf("no application key among 4M falls in [%#x, %#x), the widest range a load decision moved", pick.start, pick.end)
		}
	}
	code, out = runSlicerd(t, "job", "why", "--addr", addr, "kv", key)
	if code != 0 || !strings.Contains(out, "generation "+pick.gen+" at ") || !strings.Contains(out, ", load: ") {
		t.Fatalf("job why kv %s exited %d without naming load decision %s:\n%s", key, code, pick.gen, out)
	}
	t.Logf("job why kv %s:\n%s", key, out)
}

// startKVReporting starts a kvserver task that reports its load every
// window.
func startKVReporting(t *testing.T, task, join, window string) *kvTask {
	t.Helper()
	p := start(t, task, bin.kvserver, "-job", "kv", "-task", task, "-addr", "127.0.0.1:0",
		"-gossip-addr", "127.0.0.1:0", "-gossip-profile", "local", "-join", join, "-load-window", window)
	line := p.waitLine(30*time.Second, "kvserver task="+task)
	var addr string
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "addr="); ok {
			addr = v
		}
	}
	if addr == "" {
		t.Fatalf("no addr in %q", line)
	}
	return &kvTask{proc: p, task: task, addr: addr}
}
