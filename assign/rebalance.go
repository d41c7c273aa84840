package assign

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
)

// MoveKind says what a Move did to the assignment.
type MoveKind uint8

// Kinds of moves.
const (
	// Reassign hands [Start, End) from task From to task To.
	Reassign MoveKind = iota + 1
	// AddReplica adds task To to the tasks serving [Start, End).
	AddReplica
	// RemoveReplica removes task From from the tasks serving [Start, End).
	RemoveReplica
	// Split cuts the slice [Start, End) in two without moving keys.
	Split
	// Merge joins the adjacent slices covering [Start, End), which are
	// served by the same tasks, into one. No key moves.
	Merge
)

var moveKindNames = [...]string{
	Reassign:      "reassign",
	AddReplica:    "add-replica",
	RemoveReplica: "remove-replica",
	Split:         "split",
	Merge:         "merge",
}

func (k MoveKind) String() string {
	if int(k) < len(moveKindNames) && moveKindNames[k] != "" {
		return moveKindNames[k]
	}
	return fmt.Sprintf("MoveKind(%d)", uint8(k))
}

// Move is one step of a rebalancing decision, recorded with its reason so
// logs can explain why a key range changed hands.
type Move struct {
	Kind   MoveKind
	Start  SliceKey
	End    SliceKey
	From   string // task losing the range; empty for AddReplica, Split and Merge
	To     string // task gaining the range; empty for RemoveReplica, Split and Merge
	Reason string
	// Phase names the step of the algorithm that took the move (one of
	// the Phase constants); empty for algorithms without phases.
	Phase string
}

// Phases of the weighted-move algorithm and of Rebalance, as recorded in
// Move.Phase.
const (
	PhaseEvenSplit  = "even-split" // the key space cut evenly from scratch
	PhaseDeparted   = "departed"   // keys of departed or draining tasks placed again
	PhaseRedundancy = "redundancy" // slices brought within the job's redundancy
	PhaseJoined     = "joined"     // tasks holding nothing took their share
	PhaseMemory     = "memory"     // tasks past their memory limit relieved
	PhasePins       = "pins"       // operator pins applied
	PhaseMerge      = "merge"      // adjacent slices merged
	PhaseMove       = "move"       // load moved off the hottest tasks
	PhaseSplit      = "split"      // hot slices split
)

// String renders the move for logs, e.g.
// "reassign [0x0, 0x2aaaaaaaaaaaaaaa) b -> a: task "b" no longer serves the job (failed, left or draining)".
func (m Move) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s [%#x, %#x)", m.Kind, m.Start, m.End)
	switch {
	case m.From != "" && m.To != "":
		fmt.Fprintf(&b, " %s -> %s", m.From, m.To)
	case m.From != "":
		fmt.Fprintf(&b, " -%s", m.From)
	case m.To != "":
		fmt.Fprintf(&b, " +%s", m.To)
	}
	if m.Reason != "" {
		b.WriteString(": ")
		b.WriteString(m.Reason)
	}
	return b.String()
}

// Decision describes how Rebalance or an Algorithm got from the previous
// assignment to the next one.
type Decision struct {
	// Changed is false when the next assignment maps every key to the same
	// tasks at the same addresses, with the same slices, as the previous
	// one; callers then keep the previous generation instead of committing.
	Changed bool
	// Churn is Churn(prev, next): the fraction of the key space that gained
	// a task.
	Churn float64
	// Moves lists every step in the order it was taken.
	Moves []Move
}

// Rebalance computes the next assignment of a job from the previous one and
// the tasks that are live now. Its generation is prev.Generation+1.
//
// It follows the phases of Slicer's weighted-move algorithm that do not need
// load measurements, weighing every key the same:
//
//  1. Slices lose departed tasks; each gets a least-loaded live task per task
//     it lost, split when that task needs only part of it to reach its fair
//     share. Nothing else moves.
//  2. Slices below min(MinRedundancy, live tasks) gain least-loaded tasks;
//     slices above MaxRedundancy shed their most-loaded ones.
//  3. Each task that holds no slice takes its fair share of load from the
//     most-loaded tasks, each giving only what it holds above its own share.
//  4. Adjacent slices served by the same tasks merge.
//
// When no task of prev is live, the result is an even split as Initial
// builds it. Rebalance is deterministic: the order of live does not matter.
func Rebalance(prev *Assignment, live []Task, cfg Config) (*Assignment, Decision, error) {
	if prev == nil {
		return nil, Decision{}, fmt.Errorf("rebalance: %w: no previous assignment; build a job's first assignment with Initial", ErrInvalidAssignment)
	}
	refs, err := prev.validate(true)
	if err != nil {
		return nil, Decision{}, fmt.Errorf("rebalance: previous assignment: %w", err)
	}
	if prev.Generation == math.MaxUint64 {
		return nil, Decision{}, fmt.Errorf("rebalance: %w: job %q: generation %d cannot be incremented; recreate the job", ErrInvalidAssignment, prev.Job, prev.Generation)
	}
	if err := cfg.Validate(); err != nil {
		return nil, Decision{}, fmt.Errorf("rebalance job %q: %w", prev.Job, err)
	}
	tasks, err := sortedTasks(prev.Job, cfg.Controls(live))
	if err != nil {
		return nil, Decision{}, fmt.Errorf("rebalance: %w", err)
	}

	var next *Assignment
	var moves []Move
	if p := newPlanner(prev, refs, tasks, cfg); p != nil {
		p.phase(PhaseDeparted, p.replaceDeparted)
		p.phase(PhaseRedundancy, p.enforceRedundancy)
		p.phase(PhaseJoined, p.placeJoined)
		p.phase(PhasePins, p.applyPins)
		p.phase(PhaseMerge, p.mergeAdjacent)
		next = p.assignment(prev.Job, prev.Generation+1)
		moves = p.moves
	} else {
		next = evenSplit(prev.Job, prev.Generation+1, openTasks(tasks), cfg)
		for _, s := range next.Slices {
			for _, t := range s.Tasks {
				moves = append(moves, Move{Kind: Reassign, Start: s.Start, End: s.End, To: t, Phase: PhaseEvenSplit,
					Reason: "no task of the previous assignment is live; splitting the key space evenly"})
			}
		}
	}
	d := Decision{Changed: !Equal(prev, next), Moves: moves}
	if d.Changed {
		d.Churn = Churn(prev, next)
	}
	return next, d, nil
}

// wslice is a slice under construction. Its tasks are ids into
// planner.live, ascending, so id order is name order; they are stored as
// the window ids[off:off+n] of the planner's arena, so that a million
// slices hold no pointers for the garbage collector to follow. Windows
// are never written once filled: slices may share one, and a change
// appends a new list to the arena (see planner.setTasks).
type wslice struct {
	start, end SliceKey
	off, n     int32
}

// tasks returns the ids of the tasks serving s. The window has no spare
// capacity, so appending to it copies.
func (p *planner) tasks(s *wslice) []int32 {
	return p.ids[s.off : s.off+s.n : s.off+s.n]
}

// setTasks makes ts (sorted ids) the tasks serving s.
func (p *planner) setTasks(s *wslice, ts []int32) {
	s.off, s.n = int32(len(p.ids)), int32(len(ts))
	p.ids = append(p.ids, ts...)
}

// withTask makes s served by its tasks and t (not among them).
func (p *planner) withTask(s *wslice, t int32) {
	ts := p.tasks(s) // stays valid: appending never writes over it
	i, _ := slices.BinarySearch(ts, t)
	s.off, s.n = int32(len(p.ids)), int32(len(ts)+1)
	p.ids = append(p.ids, ts[:i]...)
	p.ids = append(p.ids, t)
	p.ids = append(p.ids, ts[i:]...)
}

// withoutTask makes s served by its tasks but t (one of them).
func (p *planner) withoutTask(s *wslice, t int32) {
	ts := p.tasks(s)
	i, _ := slices.BinarySearch(ts, t)
	s.off, s.n = int32(len(p.ids)), int32(len(ts)-1)
	p.ids = append(p.ids, ts[:i]...)
	p.ids = append(p.ids, ts[i+1:]...)
}

func (p *planner) has(s *wslice, t int32) bool {
	_, ok := slices.BinarySearch(p.tasks(s), t)
	return ok
}

// departure is a departed task that slice number slice has lost.
type departure struct {
	slice int
	name  string
}

// planner holds the assignment being built and each live task's load.
type planner struct {
	cfg        Config
	live       []Task
	slices     []wslice
	ids        []int32 // the arena of slices' task lists
	departures []departure
	load       []uint64 // by task id; see sliceLoad
	least      *taskHeap[uint64]
	most       *taskHeap[uint64]
	moves      []Move
	mem        *memory // nil without memory limits; see memory.go
	// closed marks, by task id, the cordoned and draining tasks, which
	// take no new slices; nil when every task is open.
	closed  []bool
	staying int         // live tasks that are not draining
	pins    []activePin // see pins.go
	// prev is the assignment the planner started from, and prevOf[off],
	// for an arena window at off that newPlannerRoom filled from a slice
	// of prev with two or more tasks, all still live, is that slice's
	// index plus 1 (0 for any other offset). Windows are never rewritten,
	// so a slice still on such a window has that slice's task list, and
	// assignment reuses it rather than spelling the names again. prevOf
	// is nil when no slice of prev has two tasks.
	prev   *Assignment
	prevOf []int32
	// single[t] is a one-name list of task t that prev holds, or nil:
	// assignment gives t's one-task slices that list, so that a slice
	// that keeps its task keeps its list (comparing the two assignments
	// then compares addresses; see sameList).
	single [][]string
	// outside is the number of prev's slices whose live tasks are fewer
	// than min(MinRedundancy, staying) or more than MaxRedundancy.
	outside int
	// sc is the memory the planner's slices and arena came from, and the
	// weigher's buffers come from (see scratch).
	sc *scratch
}

// isOpen reports whether task t may be given new slices.
func (p *planner) isOpen(t int32) bool { return p.closed == nil || !p.closed[t] }

// sliceLoad is the load a task carries for serving s. With no measurements
// every key weighs the same, so it is the slice's width, carried in full by
// each task that serves it. This is the one place that defines load for
// the membership phases: they only add, subtract and compare what it
// returns. WeightedMove's later phases use measured load instead (weigher).
func sliceLoad(s *wslice) uint64 { return s.end - s.start }

// newPlanner converts prev to task ids of live (sorted). refs are prev's
// slices' tasks as indices into prev.Tasks, as prev.validate returns
// them. It returns nil when no task of prev is live.
func newPlanner(prev *Assignment, refs taskRefs, live []Task, cfg Config) *planner {
	return newPlannerRoom(prev, refs, live, cfg, 0, new(scratch))
}

// newPlannerRoom is newPlanner with room for extra slices, so that phases
// which split many slices do not copy them all to grow, and its slices and
// arena from sc.
func newPlannerRoom(prev *Assignment, refs taskRefs, live []Task, cfg Config, extra int, sc *scratch) *planner {
	// Map prev's task table onto live by merging the two sorted lists.
	toLive := make([]int32, len(prev.Tasks))
	anyLive := false
	for i, j := 0, 0; i < len(prev.Tasks); i++ {
		for j < len(live) && live[j].Name < prev.Tasks[i].Name {
			j++
		}
		toLive[i] = -1
		// A draining task's slices are placed as if it had left.
		if j < len(live) && live[j].Name == prev.Tasks[i].Name && !live[j].Draining {
			toLive[i] = int32(j)
			anyLive = true
		}
	}
	if !anyLive {
		return nil
	}

	p := &planner{cfg: cfg, live: live, load: make([]uint64, len(live)), staying: len(live), sc: sc}
	for t, task := range live {
		if task.open() {
			continue
		}
		if p.closed == nil {
			p.closed = make([]bool, len(live))
		}
		p.closed[t] = true
		if task.Draining {
			p.staying--
		}
	}
	// Part by part as refs are, each part's lists at the same offsets in
	// the arena as in refs: a departed task leaves a hole, never read.
	base := make([]int, len(refs)+1)
	for i, r := range refs {
		base[i+1] = base[i] + len(r)
	}
	total := base[len(refs)]
	arena := reuse(&sc.ids, total, total) // a departed task's hole is never read
	p.slices = reuse(&sc.slices, len(prev.Slices), len(prev.Slices)+extra)
	p.prev = prev
	if total > len(prev.Slices) { // some slice has two tasks or more
		p.prevOf = reuse(&sc.prevOf, total, total)
		clear(p.prevOf)
	}
	loads := make([][]uint64, len(refs))
	gone := make([][]departure, len(refs))
	// Slices outside the redundancy bounds, by part: enforceRedundancy
	// has nothing to do without them (and departures).
	want := min(cfg.MinRedundancy, p.staying)
	outside := make([]int, len(refs))
	singles := make([][][]string, len(refs))
	inParts(len(prev.Slices), len(refs), func(part, lo, hi int) {
		load := p.load // the caller's part adds to p.load, the others to their own
		if part < len(refs)-1 {
			load = make([]uint64, len(live))
			loads[part] = load
		}
		single := make([][]string, len(live))
		singles[part] = single
		r, off := refs[part], base[part]
		k := 0 // r[k] is the next slice task
		for si := lo; si < hi; si++ {
			s := &prev.Slices[si]
			n := 0
			for _, name := range s.Tasks {
				if t := toLive[r[k]]; t >= 0 {
					arena[off+n] = t
					n++
				} else {
					gone[part] = append(gone[part], departure{slice: si, name: name})
				}
				k++
			}
			if n >= 2 && n == len(s.Tasks) {
				p.prevOf[off] = int32(si) + 1
			}
			if n == 1 && len(s.Tasks) == 1 && single[arena[off]] == nil {
				single[arena[off]] = s.Tasks[:1:1]
			}
			if n < want || n > cfg.MaxRedundancy {
				outside[part]++
			}
			ws := wslice{start: s.Start, end: s.End, off: int32(off), n: int32(n)}
			p.slices[si] = ws
			for _, t := range arena[off : off+n] {
				load[t] += sliceLoad(&ws)
			}
			off += len(s.Tasks)
		}
	})
	for _, l := range loads {
		for t, v := range l {
			p.load[t] += v
		}
	}
	p.single = singles[0]
	for _, single := range singles[1:] {
		for t, l := range single {
			if p.single[t] == nil {
				p.single[t] = l
			}
		}
	}
	p.departures = slices.Concat(gone...)
	for _, n := range outside {
		p.outside += n
	}
	p.ids = arena
	p.pins = p.activePins()
	p.least = newTaskHeap(p.load, false)
	p.most = newTaskHeap(p.load, true)
	return p
}

func (p *planner) setLoad(t int32, l uint64) {
	p.load[t] = l
	p.least.fix(t)
	p.most.fix(t)
}

// addTask makes task t serve slice si.
func (p *planner) addTask(si int, t int32) {
	s := &p.slices[si]
	p.withTask(s, t)
	p.setLoad(t, p.load[t]+sliceLoad(s))
	p.mem.add(t, p.mem.of(s))
}

// removeTask stops task t serving slice si.
func (p *planner) removeTask(si int, t int32) {
	s := &p.slices[si]
	p.withoutTask(s, t)
	p.setLoad(t, p.load[t]-sliceLoad(s))
	p.mem.add(t, -p.mem.of(s))
}

// phase runs one phase of a decision, recording its name in the moves it
// takes.
func (p *planner) phase(name string, run func()) {
	n := len(p.moves)
	run()
	for i := n; i < len(p.moves); i++ {
		p.moves[i].Phase = name
	}
	stage(name)
}

// stageHook, set by benchmarks only, is called as a decision ends each
// of its steps, with the step's name: a phase's (as in Move.Phase), or
// one of weighted-move's own (see decideWeighted). BenchmarkDecisionStages
// times them.
var stageHook func(name string)

func stage(name string) {
	if stageHook != nil {
		stageHook(name)
	}
}

// membershipPhases places departed tasks' keys, enforces redundancy,
// places joiners, relieves tasks past their memory limit and applies the
// operator's pins: every decision's first steps.
func (p *planner) membershipPhases() {
	p.phase(PhaseDeparted, p.replaceDeparted)
	p.phase(PhaseRedundancy, p.enforceRedundancy)
	p.phase(PhaseJoined, p.placeJoined)
	p.phase(PhaseMemory, p.relieveMemory)
	p.phase(PhasePins, p.applyPins)
}

func (p *planner) move(kind MoveKind, s *wslice, from, to int32, reason string) {
	m := Move{Kind: kind, Start: s.start, End: s.end, Reason: reason}
	if from >= 0 {
		m.From = p.live[from].Name
	}
	if to >= 0 {
		m.To = p.live[to].Name
	}
	p.moves = append(p.moves, m)
}

// Moving keys in pieces spreads them evenly, but in a large job every
// task is only slightly off its fair share and exact pieces would be
// slivers. So a piece is at least 1/maxSpread of what is being moved (an
// orphaned slice, a joiner's share) and at least minSplitWidth keys:
// one move touches at most about maxSpread tasks, and a task left a little
// below its share is picked first by the next move.
const (
	maxSpread     = 8
	minSplitWidth = KeySpaceEnd >> 20
)

// replaceDeparted is phase 1: every slice that lost departed tasks gets as
// many live tasks it lacks in their place, least-loaded first, unless every
// live task that is not draining already serves it. A slice larger than
// what the least-loaded task needs to reach its fair share is split, so the
// orphaned keys spread over the survivors instead of piling onto one. Only
// orphaned keys move.
func (p *planner) replaceDeparted() {
	if len(p.departures) == 0 {
		return
	}
	// The fair share once the orphaned replicas are placed.
	var hi, lo uint64
	for _, d := range p.departures {
		var c uint64
		lo, c = bits.Add64(lo, sliceLoad(&p.slices[d.slice]), 0)
		hi += c
	}
	target := p.fairShareWith(hi, lo)

	// Group by slice, then fill from the highest slice down: a split only
	// shifts the indices of slices above it, which are done by then.
	lost := make(map[int][]string)
	var order []int
	for _, d := range p.departures {
		if _, ok := lost[d.slice]; !ok {
			order = append(order, d.slice)
		}
		lost[d.slice] = append(lost[d.slice], d.name)
	}
	slices.Sort(order)
	for i := len(order) - 1; i >= 0; i-- {
		p.fillOrphaned(order[i], lost[order[i]], target)
	}
}

// fillOrphaned gives slice si one live task for each departed name, leaving
// the slice to be split when the chosen task needs only part of it.
func (p *planner) fillOrphaned(si int, departed []string, target uint64) {
	p.fillPieces(si, departed, target, max(minSplitWidth, sliceLoad(&p.slices[si])/maxSpread))
}

func (p *planner) fillPieces(si int, departed []string, target, minPiece uint64) {
	for k, name := range departed {
		s := &p.slices[si]
		t := p.placeFor(p.tasks(s), p.mem.of(s))
		if t < 0 {
			every := "every live task"
			if p.staying < len(p.live) {
				every = "every live task that is not draining"
			}
			for _, rest := range departed[k:] {
				p.moves = append(p.moves, Move{Kind: RemoveReplica, Start: s.start, End: s.end, From: rest,
					Reason: fmt.Sprintf("task %q no longer serves the job (failed, left or draining) and %s already serves the slice", rest, every)})
			}
			return
		}
		split := false
		if p.load[t] < target {
			if piece := max(target-p.load[t], minPiece); piece < sliceLoad(s) {
				p.split(si, s.start+piece)
				s, split = &p.slices[si], true
			}
		}
		// t takes the slice, or its lower part [start, start+need).
		p.addTask(si, t)
		p.moves = append(p.moves, Move{Kind: Reassign, Start: s.start, End: s.end, From: name, To: p.live[t].Name,
			Reason: fmt.Sprintf("task %q no longer serves the job (failed, left or draining)", name)})
		if split {
			// The upper part still lacks every departed task from this one on.
			p.fillPieces(si+1, departed[k:], target, minPiece)
		}
	}
}

// enforceRedundancy is phase 2: bring every slice within
// [min(MinRedundancy, live tasks), MaxRedundancy] tasks.
func (p *planner) enforceRedundancy() {
	if p.outside == 0 && len(p.departures) == 0 {
		// Every slice is as newPlannerRoom found it, within the bounds:
		// only replacing departed tasks changes slices before this.
		return
	}
	want := min(p.cfg.MinRedundancy, p.staying)
	for si := range p.slices {
		s := &p.slices[si]
		for int(s.n) < want {
			t := p.placeFor(p.tasks(s), p.mem.of(s))
			reason := fmt.Sprintf("slice has %d tasks, below the minimum redundancy %d", s.n, want)
			p.addTask(si, t)
			p.move(AddReplica, s, -1, t, reason)
		}
		for int(s.n) > p.cfg.MaxRedundancy {
			ts := p.tasks(s)
			t := ts[0]
			for _, u := range ts[1:] {
				if p.load[u] > p.load[t] {
					t = u
				}
			}
			reason := fmt.Sprintf("slice has %d tasks, above the maximum redundancy %d", s.n, p.cfg.MaxRedundancy)
			p.removeTask(si, t)
			p.move(RemoveReplica, s, t, -1, reason)
		}
	}
}

// fairShare is the load every live task would carry if load were even.
func (p *planner) fairShare() uint64 { return p.fairShareWith(0, 0) }

// fairShareWith is fairShare with extra load, the 128-bit number
// extraHi·2^64 + extraLo, still to be placed.
func (p *planner) fairShareWith(extraHi, extraLo uint64) uint64 {
	hi, lo := extraHi, extraLo
	for _, l := range p.load {
		var c uint64
		lo, c = bits.Add64(lo, l, 0)
		hi += c
	}
	// No task carries more than the whole key space, so neither can the
	// share; this also keeps the quotient within 64 bits. Draining tasks
	// hold nothing and take nothing.
	n := uint64(p.staying)
	if hi >= n {
		return KeySpaceEnd
	}
	q, _ := bits.Div64(hi, lo, n)
	return min(q, KeySpaceEnd)
}

// placeJoined is phase 3: each task that serves no slice (sorted by name)
// takes its fair share from the most-loaded tasks, one slice at a time,
// splitting the last slice so that it takes exactly its share.
func (p *planner) placeJoined() {
	// A task holds a slice exactly when it carries load: every slice is
	// at least one key wide. The loads are read before any is placed.
	held := make([]bool, len(p.live))
	for t, l := range p.load {
		held[t] = l > 0
	}
	target := p.fairShare()
	for n := range int32(len(p.live)) {
		if held[n] || !p.isOpen(n) {
			continue
		}
		for p.load[n] < target {
			t := p.most.top()
			if p.load[t] <= target {
				break // unreachable: someone is above the mean while n is below
			}
			// Take what t holds above its own fair share, so donors are
			// not emptied to feed the joiner, but no less than a
			// maxSpread-th of the joiner's share (see maxSpread).
			need := min(target-p.load[n], max(p.load[t]-target, target/maxSpread, minSplitWidth))
			si := p.donorSlice(t, n, need)
			if si < 0 {
				break // unreachable: t carries more than n, so it serves a slice n does not
			}
			reason := fmt.Sprintf("task %q joined; moving it toward its fair share", p.live[n].Name)
			if p.mem != nil {
				lo := p.slices[si].start
				if sliceLoad(&p.slices[si]) > need {
					lo = p.slices[si].end - need
				}
				if !p.mem.fits(n, p.mem.load.BytesIn(lo, p.slices[si].end)) {
					break // n is as full as its memory allows
				}
			}
			if sliceLoad(&p.slices[si]) > need {
				p.split(si, p.slices[si].end-need)
				si++
			}
			p.removeTask(si, t)
			p.addTask(si, n)
			p.move(Reassign, &p.slices[si], t, n, reason)
		}
	}
}

// donorSlice picks the slice that task n takes from task t: among slices
// served by t and not by n, the smallest that covers need, else the largest;
// ties go to the lower key. It returns -1 if there is none.
func (p *planner) donorSlice(t, n int32, need uint64) int {
	cover, largest := -1, -1
	for i := range p.slices {
		s := &p.slices[i]
		if !p.has(s, t) || p.has(s, n) {
			continue
		}
		l := sliceLoad(s)
		if l >= need && (cover < 0 || l < sliceLoad(&p.slices[cover])) {
			cover = i
		}
		if largest < 0 || l > sliceLoad(&p.slices[largest]) {
			largest = i
		}
	}
	if cover >= 0 {
		return cover
	}
	return largest
}

// split cuts slice si at key at into [start, at) and [at, end), both served
// by the same tasks. Loads do not change.
func (p *planner) split(si int, at SliceKey) {
	s := p.slices[si]
	p.moves = append(p.moves, Move{Kind: Split, Start: s.start, End: s.end,
		Reason: fmt.Sprintf("split at %#x to move only part of the slice", at)})
	upper := wslice{start: at, end: s.end, off: s.off, n: s.n} // lists are never written in place
	p.slices[si].end = at
	p.slices = slices.Insert(p.slices, si+1, upper)
}

// mergeAdjacent is phase 4: runs of adjacent slices served by the same
// tasks become one slice, except across the bounds of an active pin, which
// applyPins cuts (so that a later decision finds them cut).
func (p *planner) mergeAdjacent() {
	out := p.slices[:1]
	runStart := 0 // index in p.slices of the first slice merged into out's last
	for i := 1; i <= len(p.slices); i++ {
		if i < len(p.slices) && slices.Equal(p.tasks(&out[len(out)-1]), p.tasks(&p.slices[i])) &&
			(p.pins == nil || !p.pinBound(p.slices[i].start)) {
			out[len(out)-1].end = p.slices[i].end
			continue
		}
		if i-runStart > 1 {
			last := out[len(out)-1]
			p.moves = append(p.moves, Move{Kind: Merge, Start: last.start, End: last.end,
				Reason: fmt.Sprintf("%d adjacent slices are served by the same tasks", i-runStart)})
		}
		if i < len(p.slices) {
			out = append(out, p.slices[i])
			runStart = i
		}
	}
	clear(p.slices[len(out):])
	p.slices = out
}

// assignment is phase 5: the result, listing every live task that serves a
// slice with the address it has now.
func (p *planner) assignment(job string, gen uint64) *Assignment {
	a := &Assignment{Job: job, Generation: gen, Slices: make([]Slice, len(p.slices))}
	// Task lists are shared, never copied per slice: a million slices
	// would otherwise spell a million names. A one-task list is prev's
	// list of that task, or else a window of single; a list the planner
	// kept from prev is prev's, and any other is spelled once per arena
	// window (and part).
	single := make([]string, len(p.live))
	for t := range p.live {
		single[t] = p.live[t].Name
	}
	one := func(t int32) []string {
		if p.single != nil && p.single[t] != nil { // nil: a planner not built from prev (consistent hashing's)
			return p.single[t]
		}
		return single[t : t+1 : t+1]
	}
	k := parts(len(p.slices))
	used := make([][]bool, k) // by part, then task id
	inParts(len(p.slices), k, func(part, lo, hi int) {
		u := make([]bool, len(p.live))
		used[part] = u
		var spelled map[int32][]string
		for i := lo; i < hi; i++ {
			s := &p.slices[i]
			var ts []string
			switch {
			case s.n == 1:
				t := p.ids[s.off]
				u[t] = true
				ts = one(t)
			case int(s.off) < len(p.prevOf) && p.prevOf[s.off] > 0:
				ts = p.prev.Slices[p.prevOf[s.off]-1].Tasks
			default:
				var ok bool
				if ts, ok = spelled[s.off]; !ok {
					ts = make([]string, s.n)
					for j, t := range p.tasks(s) {
						ts[j] = p.live[t].Name
					}
					if spelled == nil {
						spelled = make(map[int32][]string)
					}
					spelled[s.off] = ts
				}
			}
			if s.n > 1 {
				for _, t := range p.tasks(s) {
					u[t] = true
				}
			}
			a.Slices[i] = Slice{Start: s.start, End: s.end, Tasks: ts}
		}
	})
	for t := range p.live {
		for _, u := range used {
			if u[t] {
				a.Tasks = append(a.Tasks, p.live[t].recorded())
				break
			}
		}
	}
	return a
}
