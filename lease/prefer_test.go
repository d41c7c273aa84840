package lease

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/slicerd/slicerd/gossip"
)

// table is an RTT estimator from a map of "a b" → RTT, symmetric.
type table map[string]time.Duration

func (tb table) rtt(a, b string) (time.Duration, bool) {
	if d, ok := tb[a+" "+b]; ok {
		return d, true
	}
	d, ok := tb[b+" "+a]
	return d, ok
}

// near puts each task at the given RTT from each assigner.
func near(rtts map[string]time.Duration, tasks ...string) table {
	tb := table{}
	for a, d := range rtts {
		for _, t := range tasks {
			tb[a+" "+t] = d
		}
	}
	return tb
}

func TestChoose(t *testing.T) {
	ms := time.Millisecond
	tasks := []string{"kv/t0", "kv/t1", "kv/t2"}
	// The rendezvous order of a1, a2, a3 for job kv decides the
	// memoryless choice among ties; compute it rather than hard-code it.
	tie := DefaultPreference().Choose("kv", []string{"a1", "a2", "a3"}, nil, nil, "")
	for _, tc := range []struct {
		name      string
		assigners []string
		tasks     []string
		rtt       table
		current   string
		want      string
	}{
		{name: "no assigner", tasks: tasks, want: ""},
		{name: "one assigner", assigners: []string{"a1"}, tasks: tasks, want: "a1"},
		{name: "nearest wins", assigners: []string{"a1", "a2", "a3"}, tasks: tasks,
			rtt: near(map[string]time.Duration{"a1": 20 * ms, "a2": 2 * ms, "a3": 30 * ms}, tasks...), want: "a2"},
		{name: "nearest replaces a far current", assigners: []string{"a1", "a2"}, tasks: tasks,
			rtt: near(map[string]time.Duration{"a1": 20 * ms, "a2": 2 * ms}, tasks...), current: "a1", want: "a2"},
		{name: "current kept within the relative margin", assigners: []string{"a1", "a2"}, tasks: tasks,
			rtt: near(map[string]time.Duration{"a1": 10 * ms, "a2": 8500 * time.Microsecond}, tasks...), current: "a1", want: "a1"},
		{name: "current kept within the absolute gain", assigners: []string{"a1", "a2"}, tasks: tasks,
			rtt: near(map[string]time.Duration{"a1": 900 * time.Microsecond, "a2": 100 * time.Microsecond}, tasks...), current: "a1", want: "a1"},
		{name: "current replaced beyond both", assigners: []string{"a1", "a2"}, tasks: tasks,
			rtt: near(map[string]time.Duration{"a1": 10 * ms, "a2": 7 * ms}, tasks...), current: "a1", want: "a2"},
		{name: "dead current replaced", assigners: []string{"a2", "a3"}, tasks: tasks,
			rtt: near(map[string]time.Duration{"a2": 5 * ms, "a3": 1 * ms}, tasks...), current: "a1", want: "a3"},
		{name: "unknown coordinates: rendezvous", assigners: []string{"a1", "a2", "a3"}, tasks: tasks, want: tie},
		{name: "no tasks: rendezvous", assigners: []string{"a3", "a1", "a2"}, want: tie},
		{name: "unknown coordinates keep the current", assigners: []string{"a1", "a2", "a3"}, tasks: tasks, current: "a3", want: "a3"},
		{name: "current with unknown distance is kept", assigners: []string{"a1", "a2"}, tasks: tasks,
			rtt: near(map[string]time.Duration{"a2": 1 * ms}, tasks...), current: "a1", want: "a1"},
		{name: "assigner with unknown distance is not chosen afresh", assigners: []string{"a1", "a2"}, tasks: tasks,
			rtt: near(map[string]time.Duration{"a2": 50 * ms}, tasks...), want: "a2"},
		{name: "median follows most tasks", assigners: []string{"a1", "a2"}, tasks: tasks,
			rtt: table{"a1 kv/t0": 1 * ms, "a1 kv/t1": 1 * ms, "a1 kv/t2": 100 * ms,
				"a2 kv/t0": 10 * ms, "a2 kv/t1": 10 * ms, "a2 kv/t2": 10 * ms}, want: "a1"},
		{name: "partly known tasks", assigners: []string{"a1", "a2"}, tasks: tasks,
			rtt: table{"a1 kv/t0": 9 * ms, "a2 kv/t0": 2 * ms}, want: "a2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rtt RTTFunc
			if tc.rtt != nil {
				rtt = tc.rtt.rtt
			}
			if got := DefaultPreference().Choose("kv", tc.assigners, tc.tasks, rtt, tc.current); got != tc.want {
				t.Errorf("Choose = %q, want %q", got, tc.want)
			}
		})
	}
}

// Equally near Assigners are chosen by rendezvous hash: the same choice
// whatever the order of the inputs, and spread evenly over many jobs.
func TestChooseTieBreak(t *testing.T) {
	assigners := []string{"a1", "a2", "a3", "a4"}
	rtt := func(a, b string) (time.Duration, bool) { return 3 * time.Millisecond, true }
	p := DefaultPreference()
	counts := map[string]int{}
	const jobs = 4000
	for i := range jobs {
		job := fmt.Sprintf("job-%d", i)
		tasks := []string{job + "/t0", job + "/t1"}
		first := p.Choose(job, assigners, tasks, rtt, "")
		for range 5 {
			shuffled := slices.Clone(assigners)
			rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			if got := p.Choose(job, shuffled, tasks, rtt, ""); got != first {
				t.Fatalf("job %s: %q with assigners in order %v, %q in order %v", job, got, shuffled, first, assigners)
			}
		}
		counts[first]++
		// Removing a non-chosen Assigner never moves the job.
		for _, gone := range assigners {
			if gone == first {
				continue
			}
			rest := slices.DeleteFunc(slices.Clone(assigners), func(a string) bool { return a == gone })
			if got := p.Choose(job, rest, tasks, rtt, ""); got != first {
				t.Fatalf("job %s moved from %s to %s when %s left", job, first, got, gone)
			}
		}
	}
	for _, a := range assigners {
		if c := counts[a]; c < jobs/len(assigners)*8/10 || c > jobs/len(assigners)*12/10 {
			t.Errorf("assigner %s preferred for %d of %d jobs; want about %d", a, c, jobs, jobs/len(assigners))
		}
	}
}

// Jittery estimates that never separate two Assigners by the margin never
// flip the choice; without the hysteresis they would flip often.
func TestChooseNoFlapping(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tasks := []string{"kv/t0", "kv/t1", "kv/t2", "kv/t3"}
	p := DefaultPreference()
	noHysteresis := Preference{Margin: 1e-9, MinGain: 1}
	cur, bare := "", ""
	changes, bareChanges := 0, 0
	for round := range 1000 {
		// Both about 5 ms away, each estimate off by up to ±8%.
		jitter := func() time.Duration {
			return time.Duration(float64(5*time.Millisecond) * (0.92 + 0.16*rng.Float64()))
		}
		tb := table{}
		for _, a := range []string{"a1", "a2"} {
			for _, task := range tasks {
				tb[a+" "+task] = jitter()
			}
		}
		next := p.Choose("kv", []string{"a1", "a2"}, tasks, tb.rtt, cur)
		if cur != "" && next != cur {
			changes++
			t.Logf("round %d: %s -> %s", round, cur, next)
		}
		cur = next
		nb := noHysteresis.Choose("kv", []string{"a1", "a2"}, tasks, tb.rtt, bare)
		if bare != "" && nb != bare {
			bareChanges++
		}
		bare = nb
	}
	if changes != 0 {
		t.Errorf("the preference changed %d times under jitter within the margin", changes)
	}
	if bareChanges < 100 {
		t.Errorf("without hysteresis the choice changed only %d times; the test's jitter is too weak to show anything", bareChanges)
	}
}

// Observers that start at different times agree: one that has no previous
// choice picks the same Assigner as one that has kept its choice, as long
// as the Assigners are within the margin of each other (both choose by
// rendezvous among near-ties) or clearly apart (both choose the nearest).
func TestChooseFreshObserverAgrees(t *testing.T) {
	p := DefaultPreference()
	tasks := []string{"kv/t0"}
	tb := near(map[string]time.Duration{"a1": 5 * time.Millisecond, "a2": 5200 * time.Microsecond}, tasks...)
	old := p.Choose("kv", []string{"a1", "a2"}, tasks, tb.rtt, "")
	tb2 := near(map[string]time.Duration{"a1": 5300 * time.Microsecond, "a2": 5 * time.Millisecond}, tasks...)
	kept := p.Choose("kv", []string{"a1", "a2"}, tasks, tb2.rtt, old)
	fresh := p.Choose("kv", []string{"a1", "a2"}, tasks, tb2.rtt, "")
	if kept != fresh {
		t.Errorf("an observer that kept %q and a fresh one that chose %q disagree", kept, fresh)
	}
}

func TestChooseSamplesTasks(t *testing.T) {
	var tasks []string
	for i := range 500 {
		tasks = append(tasks, fmt.Sprintf("kv/t%03d", i))
	}
	calls := 0
	rtt := func(a, b string) (time.Duration, bool) { calls++; return time.Millisecond, true }
	p := Preference{SampleTasks: 10}
	p.Choose("kv", []string{"a1", "a2"}, tasks, rtt, "")
	if calls != 20 {
		t.Errorf("%d RTT estimates for 2 assigners and a sample of 10 tasks", calls)
	}
	a := sampleTasks("kv", tasks, 10, nil)
	b := sampleTasks("kv", slices.Concat(tasks[250:], tasks[:250]), 10, nil)
	if !slices.Equal(a, b) {
		t.Errorf("the sample depends on the order of the tasks: %v vs %v", a, b)
	}
	c := sampleTasks("kv", append(slices.Clone(tasks), "kv/new"), 10, nil)
	if diff := len(a) - countCommon(a, c); diff > 1 {
		t.Errorf("one joining task changed %d sampled tasks", diff)
	}
}

func countCommon(a, b []string) int {
	n := 0
	for _, x := range a {
		if slices.Contains(b, x) {
			n++
		}
	}
	return n
}

func TestPreferenceValidate(t *testing.T) {
	if err := (Preference{}).Validate(); err != nil {
		t.Errorf("zero preference: %v", err)
	}
	if err := DefaultPreference().Validate(); err != nil {
		t.Errorf("default preference: %v", err)
	}
	for _, p := range []Preference{{Margin: -0.1}, {Margin: 1}, {MinGain: -1}, {SampleTasks: -1}, {Recheck: -1}} {
		if err := p.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: Validate = %v, want ErrInvalid", p, err)
		}
	}
}

func TestPreferredSkipsDeadAndAddressless(t *testing.T) {
	peers := []gossip.Peer{
		{Name: "a1", Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1", Status: gossip.StatusFailed},
		{Name: "a2", Roles: []gossip.Role{gossip.RoleAssigner}, Status: gossip.StatusAlive},
		{Name: "a3", Roles: []gossip.Role{gossip.RoleAssigner, gossip.RoleDistributor}, RPCAddr: "127.0.0.1:3", Status: gossip.StatusAlive},
		{Name: "kv/t0", Roles: []gossip.Role{gossip.RoleTask}, Job: "kv", Task: "t0", Status: gossip.StatusAlive},
	}
	p, ok := DefaultPreference().Preferred("kv", peers, nil, "a1")
	if !ok || p.Name != "a3" {
		t.Errorf("Preferred = %+v, %v; want a3", p, ok)
	}
	if _, ok := DefaultPreference().Preferred("kv", peers[3:], nil, ""); ok {
		t.Error("a preference with no live Assigner")
	}
}

// An Assigner whose network coordinate is still settling (it has just
// restarted) is left out of every observer's choice while a settled one is
// live, so observers whose estimates of it differ wildly still agree; when
// it has settled, every observer chooses afresh, together.
func TestChoicesLeaveOutSettlingAssigner(t *testing.T) {
	ms := time.Millisecond
	p := DefaultPreference()
	peer := func(name string, settling bool) gossip.Peer {
		return gossip.Peer{Name: name, Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1", Status: gossip.StatusAlive, Settling: settling}
	}
	task := gossip.Peer{Name: "kv/t0", Roles: []gossip.Role{gossip.RoleTask}, Job: "kv", Task: "t0", Status: gossip.StatusAlive}
	// x holds the restarted r's fresh coordinate, far from everything; y
	// still holds its previous run's, nearest the task.
	xEst := near(map[string]time.Duration{"a1": 5 * ms, "a2": 5 * ms, "r": 40 * ms}, "kv/t0")
	yEst := near(map[string]time.Duration{"a1": 5 * ms, "a2": 5 * ms, "r": ms}, "kv/t0")
	restarting := []gossip.Peer{peer("a1", false), peer("a2", false), peer("r", true), task}
	var x, y Choices
	gx, _ := x.Preferred(p, "kv", restarting, xEst.rtt)
	gy, _ := y.Preferred(p, "kv", restarting, yEst.rtt)
	if gx.Name != gy.Name || gx.Name == "r" {
		t.Fatalf("while r settles, x prefers %s and y prefers %s; want one of the settled Assigners for both", gx.Name, gy.Name)
	}
	settled := []gossip.Peer{peer("a1", false), peer("a2", false), peer("r", false), task}
	gx, _ = x.Preferred(p, "kv", settled, yEst.rtt)
	gy, _ = y.Preferred(p, "kv", settled, yEst.rtt)
	if gx.Name != "r" || gy.Name != "r" {
		t.Errorf("once r has settled, nearest by 4 ms, x prefers %s and y prefers %s; want r for both", gx.Name, gy.Name)
	}
	// A cluster that has just started has no settled Assigner: all of
	// them are candidates.
	fresh := []gossip.Peer{peer("a1", true), peer("a2", true), task}
	want := p.Choose("kv", []string{"a1", "a2"}, []string{"kv/t0"}, nil, "")
	if got, ok := p.Preferred("kv", fresh, nil, ""); !ok || got.Name != want {
		t.Errorf("with no Assigner settled, Preferred = %q, %v; want %q", got.Name, ok, want)
	}
}

func benchChoose(b *testing.B, assigners, tasks int) {
	var as, ts []string
	tb := table{}
	for i := range assigners {
		as = append(as, fmt.Sprintf("assigner-%d", i))
	}
	for i := range tasks {
		ts = append(ts, fmt.Sprintf("kv/task-%d", i))
	}
	for i, a := range as {
		for j, t := range ts {
			tb[a+" "+t] = time.Duration(1+i+j%7) * time.Millisecond
		}
	}
	// A map lookup per estimate, as costly as serf's cached coordinates.
	p := DefaultPreference()
	cur := ""
	b.ReportAllocs()
	for b.Loop() {
		cur = p.Choose("kv", as, ts, tb.rtt, cur)
	}
}

func BenchmarkChoose(b *testing.B) {
	for _, c := range []struct{ assigners, tasks int }{{3, 3}, {3, 32}, {5, 1000}, {10, 10000}} {
		b.Run(fmt.Sprintf("assigners=%d/tasks=%d", c.assigners, c.tasks), func(b *testing.B) { benchChoose(b, c.assigners, c.tasks) })
	}
}

// Two observers with different histories disagree while the Assigners are
// within the margin of each other, and agree again once the set of live
// Assigners changes (here: one comes back from a partition).
func TestChoicesForgetOnAssignerSetChange(t *testing.T) {
	ms := time.Millisecond
	p := DefaultPreference()
	peer := func(name string, s gossip.Status) gossip.Peer {
		return gossip.Peer{Name: name, Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1", Status: s}
	}
	task := gossip.Peer{Name: "kv/t0", Roles: []gossip.Role{gossip.RoleTask}, Job: "kv", Task: "t0", Status: gossip.StatusAlive}
	tb := near(map[string]time.Duration{"a1": 5 * ms, "a2": 5200 * time.Microsecond}, "kv/t0")
	var x, y Choices
	// Partitioned: each sees only itself, and keeps itself.
	if got, _ := x.Preferred(p, "kv", []gossip.Peer{peer("a1", gossip.StatusAlive), peer("a2", gossip.StatusFailed), task}, tb.rtt); got.Name != "a1" {
		t.Fatalf("x chose %s", got.Name)
	}
	if got, _ := y.Preferred(p, "kv", []gossip.Peer{peer("a1", gossip.StatusFailed), peer("a2", gossip.StatusAlive), task}, tb.rtt); got.Name != "a2" {
		t.Fatalf("y chose %s", got.Name)
	}
	healed := []gossip.Peer{peer("a1", gossip.StatusAlive), peer("a2", gossip.StatusAlive), task}
	gx, _ := x.Preferred(p, "kv", healed, tb.rtt)
	gy, _ := y.Preferred(p, "kv", healed, tb.rtt)
	if gx.Name != gy.Name {
		t.Fatalf("after healing x prefers %s and y prefers %s", gx.Name, gy.Name)
	}
	if x.Current("kv") != gx.Name {
		t.Errorf("Current = %q, want %q", x.Current("kv"), gx.Name)
	}
	x.Forget("kv")
	if x.Current("kv") != "" {
		t.Error("Forget kept the choice")
	}
}

// A choice made for one set of live Assigners must not be remembered once
// another call has seen a different set: the RTT estimator of a call made
// with the old view runs while a call with the new view completes, and the
// old call's choice (an Assigner the new set does not have) must not
// overwrite the new one.
func TestChoicesStaleViewDoesNotOverwrite(t *testing.T) {
	peer := func(name string) gossip.Peer {
		return gossip.Peer{Name: name, Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1", Status: gossip.StatusAlive}
	}
	task := gossip.Peer{Name: "kv/t0", Roles: []gossip.Role{gossip.RoleTask}, Job: "kv", Task: "t0", Status: gossip.StatusAlive}
	oldView := []gossip.Peer{peer("old"), task}
	newView := []gossip.Peer{peer("new"), task}
	p := DefaultPreference()
	var c Choices
	var nested gossip.Peer
	once := false
	// The estimator of the old-view call: before it answers, a call with
	// the new view chooses and remembers its choice.
	rtt := func(a, b string) (time.Duration, bool) {
		if !once {
			once = true
			nested, _ = c.Preferred(p, "kv", newView, nil)
		}
		return time.Millisecond, true
	}
	if got, _ := c.Preferred(p, "kv", oldView, rtt); got.Name != "old" {
		t.Fatalf("old view chose %s, want old", got.Name)
	}
	if nested.Name != "new" {
		t.Fatalf("new view chose %s, want new", nested.Name)
	}
	if got := c.Current("kv"); got != "new" {
		t.Errorf("remembered choice %q after the set changed to {new}, want new", got)
	}
	// The next call with the new view keeps a choice from its own set.
	if got, _ := c.Preferred(p, "kv", newView, nil); got.Name != "new" {
		t.Errorf("new view chose %s, want new", got.Name)
	}
}

// A Forget while a choice is being made wins: the choice computed from the
// forgotten one is not remembered.
func TestChoicesForgetDuringChoice(t *testing.T) {
	peer := func(name string) gossip.Peer {
		return gossip.Peer{Name: name, Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1", Status: gossip.StatusAlive}
	}
	view := []gossip.Peer{peer("a1"), peer("a2")}
	p := DefaultPreference()
	var c Choices
	if _, ok := c.Preferred(p, "kv", view, nil); !ok {
		t.Fatal("no choice")
	}
	forgot := false
	rtt := func(a, b string) (time.Duration, bool) {
		if !forgot {
			forgot = true
			c.Forget("kv")
		}
		return 0, false
	}
	c.Preferred(p, "kv", append(view, gossip.Peer{Name: "kv/t0", Roles: []gossip.Role{gossip.RoleTask}, Job: "kv", Task: "t0", Status: gossip.StatusAlive}), rtt)
	if !forgot {
		t.Fatal("the estimator was not called")
	}
	if got := c.Current("kv"); got != "" {
		t.Errorf("remembered %q although it was forgotten while choosing", got)
	}
}

// A View gives every job the choice a scan of the members gives: random
// memberships of live, dead, leaving, settling and addressless Assigners,
// tasks of several jobs in every status (more than the sample), and
// distances known for some pairs; choices remembered across memberships.
func TestViewPrefersAsMembers(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	statuses := []gossip.Status{gossip.StatusAlive, gossip.StatusAlive, gossip.StatusAlive, gossip.StatusFailed, gossip.StatusLeaving, gossip.StatusLeft}
	p := DefaultPreference()
	var scan, indexed Choices
	for round := range 200 {
		var peers []gossip.Peer
		tb := table{}
		for i := range rng.IntN(6) {
			a := gossip.Peer{Name: fmt.Sprint("a", i), Roles: []gossip.Role{gossip.RoleAssigner}, Status: statuses[rng.IntN(len(statuses))],
				Settling: rng.IntN(4) == 0}
			if rng.IntN(5) > 0 {
				a.RPCAddr = "127.0.0.1:1"
			}
			peers = append(peers, a)
		}
		jobs := 1 + rng.IntN(5)
		for j := range jobs {
			for k := range rng.IntN(40) {
				name := fmt.Sprintf("j%d/t%d", j, k)
				peers = append(peers, gossip.Peer{Name: name, Roles: []gossip.Role{gossip.RoleTask}, Job: fmt.Sprint("j", j),
					Task: fmt.Sprint("t", k), Status: statuses[rng.IntN(len(statuses))]})
				for i := range 6 {
					if rng.IntN(3) > 0 {
						tb[fmt.Sprint("a", i)+" "+name] = time.Duration(1+rng.IntN(50)) * time.Millisecond
						tb[name+" "+fmt.Sprint("a", i)] = tb[fmt.Sprint("a", i)+" "+name]
					}
				}
			}
		}
		rng.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
		var rtt RTTFunc
		if round%3 > 0 {
			rtt = tb.rtt
		}
		v := NewView(peers)
		for j := range jobs + 1 { // and a job with no task
			job := fmt.Sprint("j", j)
			for _, current := range []string{"", "a0", "a3"} {
				want, wok := p.Preferred(job, peers, rtt, current)
				got, ok := p.PreferredIn(job, v, rtt, current)
				if ok != wok || got.Name != want.Name || got.RPCAddr != want.RPCAddr {
					t.Fatalf("round %d, %s, current %q: the view prefers %q (%v), a scan %q (%v)", round, job, current, got.Name, ok, want.Name, wok)
				}
			}
			want, wok := scan.Preferred(p, job, peers, rtt)
			got, ok := indexed.PreferredIn(p, job, v, rtt)
			if ok != wok || got.Name != want.Name {
				t.Fatalf("round %d, %s: remembered choices: the view's %q (%v), a scan's %q (%v)", round, job, got.Name, ok, want.Name, wok)
			}
		}
	}
}
