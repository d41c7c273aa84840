package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/internal/testlog"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

// farDelay is the latency added to everything the "far" Assigner sends over
// gossip, so its network coordinate lands far from the job's tasks.
const farDelay = "40ms"

// haCluster is a job of three example tasks served by two Assigners on a
// shared etcd store (one near the tasks, one far), two Distributors and a
// Backup, all separate processes.
type haCluster struct {
	etcd       *etcdtest.Server
	near, far  *slicerdNode
	dists      []*slicerdNode
	backup     *slicerdNode
	tasks      map[string]*kvTask
	taskAddrs  map[string]bool
	storeFlag  string
	seedGossip string
}

func startHACluster(t *testing.T) *haCluster {
	t.Helper()
	h := &haCluster{etcd: etcdtest.Start(t), tasks: map[string]*kvTask{}, taskAddrs: map[string]bool{}}
	h.storeFlag = "etcd://" + h.etcd.Endpoint() + "/slicerd-e2e/"
	h.near = startSlicerd(t, "assigner-near", "--role", "assigner", "--store", h.storeFlag, "--data-dir", t.TempDir())
	h.seedGossip = h.near.gossipAddr
	h.far = startSlicerd(t, "assigner-far", "--role", "assigner", "--store", h.storeFlag, "--data-dir", t.TempDir(),
		"--gossip-delay", farDelay, "--join", h.seedGossip)
	for i := range 2 {
		h.dists = append(h.dists, startSlicerd(t, fmt.Sprintf("distributor-%d", i), "--role", "distributor", "--join", h.seedGossip))
	}
	h.backup = startSlicerd(t, "backup-0", "--role", "backup", "--store", h.storeFlag, "--data-dir", t.TempDir(),
		"--join", h.seedGossip)
	for i := range 3 {
		name := fmt.Sprintf("kv-%d", i)
		task := startKV(t, name, h.seedGossip)
		h.tasks[name] = task
		h.taskAddrs[task.addr] = true
	}
	return h
}

// logBuffer is a slog destination the test can search.
type logBuffer struct{ testlog.Buffer }

func (b *logBuffer) contains(substrs ...string) bool {
	return hasLine(b.String(), substrs...)
}

// hasLine reports whether one line of text holds every one of substrs.
func hasLine(text string, substrs ...string) bool {
	for _, line := range strings.Split(text, "\n") {
		all := true
		for _, s := range substrs {
			all = all && strings.Contains(line, s)
		}
		if all {
			return true
		}
	}
	return false
}

// router is a Clerk routing keys continuously, counting per phase the
// lookups that returned at least one live task.
type router struct {
	t      *testing.T
	c      *clerk.Clerk
	logs   *logBuffer
	cancel context.CancelFunc
	done   chan struct{}
	live   map[string]bool

	// The phase's lookups, counted together under mu so that a report or
	// a reset never splits one: ok of total reached a live task, and miss
	// is the first that did not.
	mu        sync.Mutex
	ok, total int64
	miss      string
}

func startRouter(t *testing.T, h *haCluster, cacheFile string) *router {
	t.Helper()
	logs := &logBuffer{}
	cfg := clerk.DefaultConfig()
	cfg.Job = "kv"
	for _, d := range h.dists {
		cfg.Addrs = append(cfg.Addrs, d.rpcAddr)
	}
	cfg.BackupAddrs = []string{h.backup.rpcAddr}
	cfg.CacheFile = cacheFile
	cfg.MinBackoff, cfg.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := clerk.New(secureClerk(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &router{t: t, c: c, logs: logs, cancel: cancel, done: make(chan struct{}), live: h.taskAddrs}
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("clerk run: %v", err)
		}
	}()
	go func() {
		defer close(r.done)
		defer func() { <-runDone }()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				r.lookup()
			}
		}
	}()
	return r
}

// lookup routes one key and counts it.
func (r *router) lookup() {
	key := fmt.Sprintf("user:%d", rand.IntN(10000))
	addrs := r.c.AssignedTasksString(key)
	hit := false
	for _, addr := range addrs {
		hit = hit || r.live[addr]
	}
	var miss string
	if !hit {
		miss = fmt.Sprintf("key %s at generation %d went to %v", key, r.c.Generation(), addrs)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	if hit {
		r.ok++
	} else if r.miss == "" {
		r.miss = miss
	}
}

// phase resets the counters and returns a func reporting the phase's
// fraction of lookups that reached a live task.
func (r *router) phase() func(name string) float64 {
	r.mu.Lock()
	r.ok, r.total, r.miss = 0, 0, ""
	r.mu.Unlock()
	return func(name string) float64 {
		r.mu.Lock()
		ok, total, first := r.ok, r.total, r.miss
		r.mu.Unlock()
		frac := 0.0
		if total > 0 {
			frac = float64(ok) / float64(total)
		}
		r.t.Logf("phase %s: %d of %d lookups returned a live task (%.4f%%)", name, ok, total, 100*frac)
		if total == 0 || ok != total {
			miss := "no lookup ran"
			if first != "" {
				miss = "first miss: " + first
			}
			r.t.Errorf("phase %s: %d of %d lookups returned a live task; want all (%s; live tasks %v)", name, ok, total, miss, r.live)
		}
		return frac
	}
}

func (r *router) stop() {
	r.cancel()
	<-r.done
}

// TestClientsSurviveControlPlaneLoss runs the four phases against
// real processes: the preferred Assigner is SIGKILLed (the far one takes
// over), then every Assigner and Distributor (the Backup serves), then
// every slicerd process (the client routes on what it has), and finally
// the client restarts while slicerd is down (it routes from its persisted
// copy). Every phase must route every lookup to a live task.
func TestClientsSurviveControlPlaneLoss(t *testing.T) {
	h := startHACluster(t)
	cache := filepath.Join(t.TempDir(), "kv.assignment")
	r := startRouter(t, h, cache)
	defer func() { r.stop() }()

	testwait.Until(t, 60*time.Second, "an assignment over all three tasks", func() bool {
		a := r.c.Assignment()
		return a != nil && len(a.Tasks) == 3
	})
	// Until network coordinates settle, either Assigner may lead; then the
	// near one must take the job and keep it.
	h.waitNearLeads(t, r)
	led := r.c.Generation()
	testwait.Until(t, 10*time.Second, "the client to see the near assigner's generation", func() bool {
		return r.c.Generation() >= lastCommitted(h.near)
	})
	time.Sleep(2 * time.Second)
	if g := lastCommitted(h.far); g > lastCommitted(h.near) {
		t.Fatalf("the far assigner committed generation %d after the near one led job kv (from %d):\n%s", g, led, h.far.output())
	}

	// (a) The preferred Assigner dies.
	done := r.phase()
	before := r.c.Generation()
	killed := time.Now()
	h.near.signal(syscall.SIGKILL)
	h.near.wait(10 * time.Second)
	testwait.Until(t, 30*time.Second, "a new generation after the near assigner was killed", func() bool {
		return r.c.Generation() > before
	})
	t.Logf("failover: kill to first new generation seen by the client: %v", time.Since(killed).Round(time.Millisecond))
	if !h.far.hasLine(`"msg":"took over job as its preferred assigner"`, `"job":"kv"`) {
		t.Errorf("the far assigner did not log its takeover:\n%s", h.far.output())
	}
	time.Sleep(time.Second) // route for a while on the new generation
	done("a: preferred assigner killed")

	// (b) Every Assigner and Distributor dies; the Backup serves.
	done = r.phase()
	for _, n := range append([]*slicerdNode{h.far}, h.dists...) {
		n.signal(syscall.SIGKILL)
	}
	for _, n := range append([]*slicerdNode{h.far}, h.dists...) {
		n.wait(10 * time.Second)
	}
	// A client starting now, without a cache, can only get the assignment
	// from the Backup.
	fresh := startRouter(t, h, "")
	testwait.Until(t, 30*time.Second, "a new client to get the assignment from the backup", func() bool {
		return fresh.logs.contains(`"backup":true`, `streaming assignments`)
	})
	freshDone := fresh.phase()
	time.Sleep(time.Second)
	freshDone("b: new client served by the backup")
	fresh.stop()
	done("b: assigners and distributors killed")

	// (c) Every slicerd process is gone.
	done = r.phase()
	h.backup.signal(syscall.SIGKILL)
	h.backup.wait(10 * time.Second)
	time.Sleep(2 * time.Second)
	done("c: every slicerd process killed")

	// (d) The client restarts while slicerd is down.
	gen := r.c.Generation()
	r.stop()
	r = startRouter(t, h, cache)
	done = r.phase()
	if g := r.c.Generation(); g != gen {
		t.Errorf("restarted client starts at generation %d; want %d from its cache file", g, gen)
	}
	time.Sleep(2 * time.Second)
	done("d: client restarted while slicerd is down")
}

// hasLine reports whether one line of the process's output holds every one
// of substrs.
func (p *proc) hasLine(substrs ...string) bool { return hasLine(p.output(), substrs...) }

// lastCommitted is the highest generation the process logged committing for
// job kv; 0 if none.
func lastCommitted(p *slicerdNode) uint64 {
	var last uint64
	for _, line := range strings.Split(p.output(), "\n") {
		if !strings.Contains(line, `"msg":"assignment committed"`) || !strings.Contains(line, `"job":"kv"`) {
			continue
		}
		var rec struct {
			Generation uint64 `json:"generation"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil {
			last = max(last, rec.Generation)
		}
	}
	return last
}

// waitNearLeads waits until both Assigners agree that the near one leads
// job kv, the near one has committed the job's newest generation and r's
// client has it. On a timeout it says which of those failed, with each
// Assigner's leadership lines, since the processes' whole outputs may be
// too long to read where the failure is reported.
func (h *haCluster) waitNearLeads(t *testing.T, r *router) {
	t.Helper()
	var state string
	_, ok := testwait.Poll(t, 60*time.Second, func() bool {
		near, far := lastCommitted(h.near), lastCommitted(h.far)
		client := r.c.Generation()
		state = fmt.Sprintf("near's last word %q, far's %q; last committed by near %d, by far %d; the client has %d",
			lastWordOnKV(h.near.output()), lastWordOnKV(h.far.output()), near, far, client)
		return h.nearLeads() && near >= far && client >= near
	})
	if !ok {
		t.Fatalf("timed out waiting for both assigners to agree the near one leads job kv: %s\n"+
			"near's leadership lines:\n%s\nfar's leadership lines:\n%s",
			state, leadershipLines(h.near.output()), leadershipLines(h.far.output()))
	}
}

// leadershipLines are the last lines of an Assigner's output about who
// generates job kv: lease changes, adoptions, takeovers and commits.
func leadershipLines(output string) string {
	var out []string
	for _, line := range strings.Split(output, "\n") {
		if !strings.Contains(line, `"job":"kv"`) {
			continue
		}
		for _, s := range []string{"lease", "adopt", "took over", "preferred", "committed", "holder"} {
			if strings.Contains(line, s) {
				out = append(out, line)
				break
			}
		}
	}
	if len(out) > 40 {
		out = out[len(out)-40:]
	}
	return strings.Join(out, "\n")
}

// nearLeads reports whether the near Assigner holds job kv and the far one
// agrees: the near one's last word on the job is a takeover, and the far
// one either never led the job (the near one took it first) or last said
// that the near one is preferred, having released it. Killing the near one
// must then hand the job over with a new generation.
func (h *haCluster) nearLeads() bool {
	if lastWordOnKV(h.near.output()) != "took over" {
		return false
	}
	switch lastWordOnKV(h.far.output()) {
	case "":
		return true
	case "released to assigner-near", "adoption lapsed":
		// An adoption that lapsed held nothing: the near one won the
		// lease while both adopted the job (each had forwarded the
		// other a write while neither held it).
		return true
	}
	return false
}

// lastWordOnKV is an Assigner's last logged change of its leadership of job
// kv: "took over", "released to NAME", "adopting", "adoption lapsed",
// "choosing afresh", or "" if it logged none.
func lastWordOnKV(output string) string {
	lines := strings.Split(output, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		if !strings.Contains(line, `"job":"kv"`) {
			continue
		}
		switch {
		case strings.Contains(line, `adopting the job`):
			// Before the release case: the adopt line says "another
			// assigner is preferred" too.
			return "adopting"
		case strings.Contains(line, `another assigner is preferred`):
			var rec struct {
				Preferred string `json:"preferred"`
			}
			_ = json.Unmarshal([]byte(line), &rec)
			return "released to " + rec.Preferred
		case strings.Contains(line, `"msg":"took over job`):
			return "took over"
		case strings.Contains(line, `choosing the preferred assigner afresh`):
			return "choosing afresh"
		case strings.Contains(line, `adoption lapsed`):
			return "adoption lapsed"
		}
	}
	return ""
}
