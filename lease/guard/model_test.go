package guard

import (
	"fmt"
	"hash/maphash"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slicerd/slicerd/lease"
)

// The model: a job of nKeys keys and nTasks tasks on one lease manager,
// written by nAssigners Assigners, through the generations of assignments
// below. Its state is everything the protocol's parties hold: the
// manager's leases, live reads and epoch, each Assigner's lease and plan,
// each task's reads. explore visits every state
// reachable by any interleaving of the events in next, and checks each.
const (
	nAssigners = 2
	nTasks     = 3
	nKeys      = 3
	maxGen     = 4
	maxEpoch   = 3
)

// assignments[g][k] is the task generation g gives key k. Every
// transition keeps some keys with their task (the bridge carries them)
// and moves others; 1→2→3 moves k0 away from t0 after a bridge kept it
// there, the interrupted move of the two-owner bug.
var assignments = [maxGen + 1][nKeys]uint8{
	1: {0, 1, 2},
	2: {0, 0, 2},
	3: {1, 0, 2},
	4: {1, 2, 0},
}

type val struct{ f, t uint8 }

func (v val) lease() lease.Value { return lease.Value{From: uint64(v.f), To: uint64(v.t)} }

func valOf(v lease.Value) val { return val{uint8(v.From), uint8(v.To)} }

func (v val) zero() bool { return v == val{} }

func (v val) String() string {
	switch {
	case v.zero():
		return "-"
	case v.f == v.t:
		return fmt.Sprint(v.f)
	}
	return fmt.Sprintf("%d→%d", v.f, v.t)
}

// lst is a guard or bridge as the manager has it.
type lst struct {
	set, rec bool
	v        val
}

func (l lst) state() lease.State { return lease.State{Set: l.set, Recalled: l.rec, Value: l.v.lease()} }

func (l lst) String() string {
	switch {
	case !l.set:
		return "unset"
	case l.rec:
		return l.v.String() + " recalled"
	}
	return l.v.String() + " open"
}

// astate is an Assigner: the epoch of the job lease it believes it holds
// (0: none) and its plan in progress. It plans for the newest committed
// generation: an Assigner reads the store when it takes a job's lease
// and then is the only one to commit, so its view is the store's while
// its epoch is the newest; one whose epoch is not gets lease.ErrLost at
// its next call, whatever it planned for.
type astate struct {
	epoch uint8
	// plan holds the calls of the plan in progress not yet made, in
	// order; n counts them. Two Assigners with the same calls left behave
	// alike, whatever they saw when they planned.
	plan [maxCalls]mcall
	n    uint8
}

// maxCalls bounds a plan's length.
const maxCalls = 8

// mcall is a Call in the model's state.
type mcall struct {
	op Op
	v  val
}

func (c mcall) call() Call { return Call{Op: c.op, Value: c.v.lease()} }

// tstate is a task: the reads it holds (its view) and the newest
// assignment it has.
//
// A task decides from the leases' states as its last response reported
// them, which may be stale when its next call arrives. The model lets it
// decide from the states as they are instead, which loses no behaviour:
// every call Follow makes is a Read at a value, granted only if the lease
// is open at that value when the call arrives, and then Follow would
// choose the same call from the states at arrival; and the steps a task
// takes alone (dropping and releasing reads) only shrink what it uses.
//
// A task has every committed assignment at once: a real one may not yet,
// and then Follow waits, which the model covers by letting any task stay
// idle as long as it likes.
type tstate struct {
	g, b val
}

// state is the whole system.
type state struct {
	committed uint8
	epoch     uint8 // the job lease's newest epoch
	free      bool  // the job lease expired or was released: anyone may acquire it
	leases    [2]lst
	reads     [2][nTasks]val // live read leases, by kind and task
	ghosts    [2][nTasks]val // reads granted before a manager restart
	unknown   bool           // the restarted manager refuses Set and Wait while ghosts may remain
	as        [nAssigners]astate
	ts        [nTasks]tstate
	maxTok    [nKeys]uint8 // the highest token each key was ever used with
	faults    uint8
}

// A planner is Plan, or a broken variant the checker must catch.
type planner func(target uint64, g, b lease.State, bridged bool) Move

type model struct {
	plan      planner
	bridged   bool
	maxFaults uint8
	buf       []succ // next's, reused
	// keepBridge breaks the reader: it keeps its bridge after reading
	// the guard, to show that the checker sees tokens go back.
	keepBridge bool
}

func kindIdx(k lease.Kind) int { return int(k) - 1 }

// event is one transition, formatted only for traces.
type event struct {
	who  int8 // Assigner ai as ai, task t as 10+t, the manager as -1
	tag  tag
	arg  uint8
	call Call
	step ReadStep
	obs  [2]lst
}

type tag uint8

const (
	evCommit tag = iota
	evAcquire
	evCrash
	evLapse
	evRestart
	evGrace
	evExpire
	evGhostExpire
	evPlan
	evLost
	evBusy
	evCall
	evAmbiguous
	evFail
	evTaskRestart
	evRead
	evRefused
)

func (e event) describe(plan planner) string {
	who := "manager"
	switch {
	case e.who >= 10:
		who = fmt.Sprintf("t%d", e.who-10)
	case e.who >= 0:
		who = fmt.Sprintf("A%d", e.who)
	}
	var what string
	switch e.tag {
	case evCommit:
		what = fmt.Sprintf("commits generation %d", e.arg)
	case evAcquire:
		what = fmt.Sprintf("acquires the job lease at epoch %d", e.arg)
	case evCrash:
		what = "crashes"
	case evLapse:
		what = "lets the job lease expire (its holder paused)"
	case evRestart:
		what = "restarts from its persisted state (and its Assigner with it)"
	case evGrace:
		what = "ends the restart's grace period"
	case evExpire:
		what = fmt.Sprintf("lets its %v read expire", lease.Kind(e.arg))
	case evGhostExpire:
		what = fmt.Sprintf("lets its pre-restart %v read expire", lease.Kind(e.arg))
	case evPlan:
		mv := plan(uint64(e.arg), e.obs[0].state(), e.obs[1].state(), e.call.Op != 0)
		var calls []string
		for _, c := range mv.Calls {
			calls = append(calls, c.String())
		}
		what = fmt.Sprintf("reads guard %v, bridge %v; plans: %s", e.obs[0], e.obs[1], strings.Join(calls, ", "))
	case evLost:
		what = fmt.Sprintf("%v: lost (epoch %d is not the job's)", e.call, e.arg)
	case evBusy:
		what = fmt.Sprintf("%v: busy", e.call)
	case evCall:
		what = e.call.String()
	case evAmbiguous:
		what = fmt.Sprintf("%v: takes effect, but the reply is an error", e.call)
	case evFail:
		what = fmt.Sprintf("%v: fails", e.call)
	case evTaskRestart:
		what = "restarts"
	case evRead:
		what = e.step.String()
	case evRefused:
		what = e.step.String() + ": refused"
	}
	return who + ": " + what
}

type succ struct {
	ev event
	s  state
}

// owned reports whether task owns key at gen.
func owned(gen uint8, task, key int) bool { return gen != 0 && assignments[gen][key] == uint8(task) }

// usable reports, for task and key, whether the task may use the key now
// and with which token. A read is usable while the task's view holds it
// and the manager still counts it (a task stops using a read before the
// manager lets it go, so this over-approximates, which is the safe side).
func (s *state) usable(task, key int) (bool, uint8) {
	t := &s.ts[task]
	live := func(k lease.Kind, v val) bool {
		return s.reads[kindIdx(k)][task] == v || s.ghosts[kindIdx(k)][task] == v
	}
	if !t.g.zero() && live(lease.Guard, t.g) && owned(t.g.f, task, key) {
		return true, t.g.f
	}
	if !t.b.zero() && live(lease.Bridge, t.b) && owned(t.b.f, task, key) && owned(t.b.t, task, key) {
		return true, t.b.f
	}
	return false, 0
}

// check returns what is wrong with s, and s with its token history
// updated.
func (s state) check() (state, string) {
	for k := 0; k < nKeys; k++ {
		users := 0
		for task := 0; task < nTasks; task++ {
			ok, tok := s.usable(task, k)
			if !ok {
				continue
			}
			users++
			if tok < s.maxTok[k] {
				return s, fmt.Sprintf("key k%d used by t%d with token %d after token %d", k, task, tok, s.maxTok[k])
			}
			s.maxTok[k] = tok
		}
		if users > 1 {
			var who []string
			for task := 0; task < nTasks; task++ {
				if ok, tok := s.usable(task, k); ok {
					who = append(who, fmt.Sprintf("t%d (token %d)", task, tok))
				}
			}
			return s, fmt.Sprintf("key k%d usable by two tasks: %s", k, strings.Join(who, ", "))
		}
	}
	return s, ""
}

func (s *state) anyReads(k lease.Kind) bool {
	for task := 0; task < nTasks; task++ {
		if !s.reads[kindIdx(k)][task].zero() {
			return true
		}
	}
	return false
}

func (s *state) anyGhosts() bool {
	for k := range s.ghosts {
		for task := range s.ghosts[k] {
			if !s.ghosts[k][task].zero() {
				return true
			}
		}
	}
	return false
}

// next lists s's successors.
func (m *model) next(s state) []succ {
	out := m.buf[:0]
	defer func() { m.buf = out }()
	add := func(e event, n state) { out = append(out, succ{e, n}) }
	fault := s.faults < m.maxFaults

	// The store and the lease manager.
	for ai := range s.as {
		a := s.as[ai]
		who := int8(ai)
		if a.epoch != 0 && a.epoch == s.epoch && s.committed < maxGen {
			n := s
			n.committed++
			add(event{who: who, tag: evCommit, arg: n.committed}, n)
		}
		if s.free && a.epoch == 0 && s.epoch < maxEpoch {
			n := s
			n.epoch++
			n.free = false
			n.as[ai] = astate{epoch: n.epoch}
			add(event{who: who, tag: evAcquire, arg: n.epoch}, n)
		}
		if fault && a.epoch != 0 {
			n := s
			n.faults++
			n.as[ai] = astate{}
			n.free = n.free || a.epoch == s.epoch // nobody renews its lease
			add(event{who: who, tag: evCrash}, n)
		}
		out = append(out, m.drive(s, ai)...)
	}
	if fault && !s.free {
		n := s
		n.faults++
		n.free = true
		add(event{who: -1, tag: evLapse}, n)
	}
	if fault {
		n := s
		n.faults++
		for k := range n.reads {
			for task := range n.reads[k] {
				if !n.reads[k][task].zero() {
					n.ghosts[k][task] = n.reads[k][task]
				}
				n.reads[k][task] = val{}
			}
		}
		n.unknown = true
		n.free = true
		for ai := range n.as {
			n.as[ai] = astate{}
		}
		add(event{who: -1, tag: evRestart}, n)
	}
	if s.unknown && !s.anyGhosts() {
		n := s
		n.unknown = false
		add(event{who: -1, tag: evGrace}, n)
	}
	for k := range s.reads {
		for task := range s.reads[k] {
			if !s.reads[k][task].zero() {
				n := s
				n.reads[k][task] = val{}
				add(event{who: int8(10 + task), tag: evExpire, arg: uint8(k + 1)}, n)
			}
			if !s.ghosts[k][task].zero() {
				n := s
				n.ghosts[k][task] = val{}
				add(event{who: int8(10 + task), tag: evGhostExpire, arg: uint8(k + 1)}, n)
			}
		}
	}

	// The tasks.
	for task := range s.ts {
		out = append(out, m.follow(s, task)...)
	}
	return out
}

// drive lists the steps of Assigner ai's guard driver.
func (m *model) drive(s state, ai int) []succ {
	a := s.as[ai]
	who := int8(ai)
	if a.epoch == 0 {
		return nil
	}
	var out []succ
	if a.n == 0 {
		mv := m.plan(uint64(s.committed), s.leases[0].state(), s.leases[1].state(), m.bridged)
		switch {
		case mv.Behind:
			panic(fmt.Sprintf("a plan for the newest generation %d finds the leases ahead of it: guard %v, bridge %v", s.committed, s.leases[0], s.leases[1]))
		case !mv.Done:
			n := s
			if len(mv.Calls) > maxCalls {
				panic(fmt.Sprintf("a plan of %d calls: %v", len(mv.Calls), mv.Calls))
			}
			for i, c := range mv.Calls {
				n.as[ai].plan[i] = mcall{c.Op, valOf(c.Value)}
			}
			n.as[ai].n = uint8(len(mv.Calls))
			e := event{who: who, tag: evPlan, arg: s.committed, obs: s.leases}
			if m.bridged {
				e.call.Op = AwaitBridge // marks a bridged plan for String
			}
			out = append(out, succ{e, n})
		}
		return out
	}
	c := a.plan[0].call()
	k := kindIdx(c.Op.Kind())
	abandon := func(n state) state {
		n.as[ai].plan, n.as[ai].n = [maxCalls]mcall{}, 0
		return n
	}
	if a.epoch != s.epoch {
		n := abandon(s)
		n.as[ai].epoch = 0
		return []succ{{event{who: who, tag: evLost, call: c, arg: a.epoch}, n}}
	}
	// The call's effect, if it has one now; ok false while it blocks.
	n := s
	ok := true
	busy := false
	switch c.Op {
	case RecallBridge, RecallGuard:
		if n.leases[k].set {
			n.leases[k].rec = true
		}
	case WaitBridge, WaitGuard:
		ok = !s.anyReads(c.Op.Kind()) && !s.unknown
	case SetBridge, SetGuard:
		if s.anyReads(c.Op.Kind()) || s.unknown {
			busy = true
		} else {
			n.leases[k] = lst{set: true, v: valOf(c.Value)}
		}
	case AwaitBridge:
	}
	if busy {
		out = append(out, succ{event{who: who, tag: evBusy, call: c}, abandon(s)})
	} else if ok {
		copy(n.as[ai].plan[:], n.as[ai].plan[1:])
		n.as[ai].plan[maxCalls-1] = mcall{}
		n.as[ai].n--
		out = append(out, succ{event{who: who, tag: evCall, call: c}, n})
		if s.faults < m.maxFaults && c.Op != AwaitBridge && n.leases != s.leases {
			e := abandon(n)
			e.faults++
			out = append(out, succ{event{who: who, tag: evAmbiguous, call: c}, e})
		}
	}
	if s.faults < m.maxFaults && c.Op != AwaitBridge {
		e := abandon(s)
		e.faults++
		out = append(out, succ{event{who: who, tag: evFail, call: c}, e})
	}
	return out
}

// follow lists task's steps: a read of the leases' state, and whatever
// Follow decides for each way the task's clock may judge its reads.
func (m *model) follow(s state, task int) []succ {
	t := s.ts[task]
	who := int8(10 + task)
	var out []succ
	if s.faults < m.maxFaults && (!t.g.zero() || !t.b.zero()) {
		n := s
		n.faults++
		n.ts[task].g, n.ts[task].b = val{}, val{}
		out = append(out, succ{event{who: who, tag: evTaskRestart}, n})
	}
	have := func(gen uint64) bool { return gen <= uint64(s.committed) }
	liveG := s.reads[0][task] == t.g || s.ghosts[0][task] == t.g
	liveB := s.reads[1][task] == t.b || s.ghosts[1][task] == t.b
	var seen [4]ReadStep
	ns := 0
	for _, due := range []bool{false, true} {
		for _, valid := range []bool{false, true} {
			h := Held{Guard: t.g.lease(), Bridge: t.b.lease(),
				GuardValid: valid && liveG, BridgeValid: valid && liveB, GuardDue: due, BridgeDue: due}
			st := Follow(h, s.leases[0].state(), s.leases[1].state(), have)
			if st.Op == Idle || slices.Contains(seen[:ns], st) {
				continue
			}
			seen[ns] = st
			ns++
			out = append(out, m.readStep(s, task, st))
		}
	}
	return out
}

// readStep applies one of task's steps: a read updates the task's view of
// both leases, as a ReadLease response does.
func (m *model) readStep(s state, task int, st ReadStep) succ {
	n := s
	t := &n.ts[task]
	e := event{who: int8(10 + task), tag: evRead, step: st}
	read := func(k lease.Kind, v val) bool {
		l := s.leases[kindIdx(k)]
		if l.set && !l.rec && l.v == v {
			n.reads[kindIdx(k)][task] = v
			return true
		}
		return false
	}
	switch st.Op {
	case DropGuard:
		t.g = val{}
	case DropBridge:
		t.b = val{}
		n.reads[1][task] = val{}
	case RenewGuard:
		if !read(lease.Guard, t.g) {
			e.tag = evRefused
		}
	case RenewBridge:
		if !read(lease.Bridge, t.b) {
			e.tag = evRefused
		}
	case ReleaseGuard:
		t.g = val{}
		n.reads[0][task] = val{}
	case TakeBridge:
		if read(lease.Bridge, valOf(st.Value)) {
			t.b = valOf(st.Value)
		} else {
			e.tag = evRefused
		}
	case ReadGuard:
		if read(lease.Guard, valOf(st.Value)) {
			t.g = valOf(st.Value)
			if !t.b.zero() && !m.keepBridge {
				t.b = val{}
				n.reads[1][task] = val{}
			}
		} else {
			e.tag = evRefused
		}
	}
	return succ{e, n}
}

// result is what explore found.
type result struct {
	states int
	trace  []string // the events to the first bad state, and what is wrong
	took   time.Duration
}

// explore visits every reachable state breadth first, so a trace it
// returns is a shortest one. It keeps each state once, with its parent's
// index, and recognises states it has seen by a 128-bit hash (with 10^7
// states, the chance that two collide and one goes unexplored is about
// 10^-24); a trace is rebuilt by replaying the path's events.
func (m *model) explore(limit int) result {
	start := time.Now()
	// A0 holds the job lease at epoch 1, and the job is at generation
	// 1 with no guard yet. (A1 taking it first is the same, renamed.)
	init := state{committed: 1, epoch: 1}
	init.as[0].epoch = 1
	var nodes chunks
	nodes.add(node{s: init, parent: -1})
	seeds := [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	key := func(s state) [2]uint64 {
		return [2]uint64{maphash.Comparable(seeds[0], s), maphash.Comparable(seeds[1], s)}
	}
	seen := map[[2]uint64]struct{}{key(init): {}}
	traceTo := func(i int32, bad string) []string {
		var path []int32
		for ; i >= 0; i = nodes.at(i).parent {
			path = append(path, i)
		}
		slices.Reverse(path)
		var tr []string
		for p := 1; p < len(path); p++ {
			from, to := nodes.at(path[p-1]).s, nodes.at(path[p]).s
			for _, sc := range m.next(from) {
				if ns, _ := sc.s.check(); ns == to {
					tr = append(tr, sc.ev.describe(m.plan))
					break
				}
			}
		}
		return append(tr, "=> "+bad)
	}
	for i := int32(0); int(i) < nodes.n; i++ {
		if nodes.n > limit {
			return result{states: nodes.n, trace: []string{fmt.Sprintf("=> more than %d states; raise the limit or lower the bounds", limit)}, took: time.Since(start)}
		}
		for _, sc := range m.next(nodes.at(i).s) {
			ns, bad := sc.s.check()
			k := key(ns)
			if _, ok := seen[k]; ok {
				continue
			}
			seen[k] = struct{}{}
			nodes.add(node{s: ns, parent: i})
			if bad != "" {
				return result{states: nodes.n, trace: traceTo(int32(nodes.n-1), bad), took: time.Since(start)}
			}
		}
	}
	return result{states: nodes.n, took: time.Since(start)}
}

type node struct {
	s      state
	parent int32
}

// chunks stores nodes in fixed blocks, so that growing never copies them.
type chunks struct {
	blocks [][]node
	n      int
}

const chunkSize = 1 << 16

func (c *chunks) add(nd node) {
	if c.n%chunkSize == 0 {
		c.blocks = append(c.blocks, make([]node, 0, chunkSize))
	}
	b := &c.blocks[len(c.blocks)-1]
	*b = append(*b, nd)
	c.n++
}

func (c *chunks) at(i int32) *node { return &c.blocks[i/chunkSize][i%chunkSize] }

// modelFaults is how many faults (crashes, lapsed job leases, failed
// calls, task and manager restarts) one run of the model may contain:
// 1 by default, which the model explores in about 30 s; set
// SLICERD_MODEL_FAULTS for a deeper run. Under the race detector, which
// slows the exploration about tenfold, the default is 0;
// scripts/test.sh runs the default depth without it.
func modelFaults(t *testing.T) uint8 {
	if v := os.Getenv("SLICERD_MODEL_FAULTS"); v != "" {
		n, err := strconv.ParseUint(v, 10, 8)
		if err != nil {
			t.Fatalf("SLICERD_MODEL_FAULTS=%q: want a small count of faults: %v", v, err)
		}
		return uint8(n)
	}
	if raceEnabled {
		return 0
	}
	return 1
}

// Every state the protocol can reach, with and without bridges, has at
// most one task able to use each key, and no key's token goes back.
func TestModel(t *testing.T) {
	faults := modelFaults(t)
	for _, bridged := range []bool{true, false} {
		t.Run(fmt.Sprintf("bridged=%v", bridged), func(t *testing.T) {
			m := &model{plan: Plan, bridged: bridged, maxFaults: faults}
			r := m.explore(200_000_000)
			t.Logf("%d assigners, %d tasks, %d keys, %d generations, up to %d faults: %d states in %v",
				nAssigners, nTasks, nKeys, maxGen, faults, r.states, r.took.Round(time.Millisecond))
			if r.trace != nil {
				t.Fatalf("counterexample after %d states:\n  %s", r.states, strings.Join(r.trace, "\n  "))
			}
		})
	}
}

// legacyPlan is the driver slicerd had before this package: a step that
// found the guard recalled set it to the newest generation without
// looking at the bridge. The model must find what that did.
func legacyPlan(target uint64, g, b lease.State, bridged bool) Move {
	switch {
	case target == 0, g.Set && !g.Recalled && g.Value.From == target:
		return Move{Done: true}
	case g.Set && g.Value.From > target:
		return Move{Behind: true}
	}
	var calls []Call
	if g.Set && !g.Recalled {
		want := lease.Value{From: g.Value.From, To: target}
		if bridged {
			if !b.Set || b.Recalled || b.Value != want {
				if b.Set && !b.Recalled {
					calls = append(calls, Call{Op: RecallBridge})
				}
				if b.Set {
					calls = append(calls, Call{Op: WaitBridge})
				}
				calls = append(calls, Call{Op: SetBridge, Value: want})
			}
			calls = append(calls, Call{Op: AwaitBridge, Value: want})
		}
		calls = append(calls, Call{Op: RecallGuard})
	}
	if g.Set {
		calls = append(calls, Call{Op: WaitGuard})
	}
	return Move{To: target, Calls: append(calls, Call{Op: SetGuard, Value: lease.GuardValue(target)})}
}

// The model finds the two-owner bug of the old driver: a move
// interrupted after its recall, then a guard set beside the open bridge.
func TestModelFindsInterruptedMove(t *testing.T) {
	m := &model{plan: legacyPlan, bridged: true, maxFaults: 1}
	r := m.explore(50_000_000)
	if r.trace == nil {
		t.Fatalf("explored %d states of the old driver and found nothing wrong", r.states)
	}
	last := r.trace[len(r.trace)-1]
	if !strings.Contains(last, "usable by two tasks") {
		t.Fatalf("the old driver's counterexample is not a double owner:\n  %s", strings.Join(r.trace, "\n  "))
	}
	t.Logf("the old driver, after %d states in %v:\n  %s", r.states, r.took.Round(time.Millisecond), strings.Join(r.trace, "\n  "))
}

// The model catches a reader that keeps using its bridge after reading
// the guard at the bridge's target: once that guard read lapses, the
// bridge's older token is back in use.
func TestModelFindsTokenRegression(t *testing.T) {
	r := (&model{plan: Plan, bridged: true, keepBridge: true}).explore(50_000_000)
	if r.trace == nil || !strings.Contains(r.trace[len(r.trace)-1], "after token") {
		t.Fatalf("explored %d states of a reader that keeps its bridge; want a token regression, got %q", r.states, r.trace)
	}
	t.Logf("after %d states:\n  %s", r.states, strings.Join(r.trace, "\n  "))
}
