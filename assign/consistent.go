package assign

import (
	"cmp"
	"math"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// Constants of the consistent-hashing baseline.
const (
	// chBaseVnodes is the number of virtual nodes a task starts with.
	chBaseVnodes = 100
	// chMinVnodes and chMaxVnodes bound a task's virtual nodes, so that no
	// task vanishes from the ring or swallows it.
	chMinVnodes = 16
	chMaxVnodes = 400
	// chGain is the fraction of the step toward the load-proportional
	// count taken per decision; lower is steadier, higher is faster.
	chGain = 0.5
	// chDeadband leaves a task's count alone while its load is this close
	// to the mean, so a steady load makes no churn.
	chDeadband = 0.05
	// chHotShare sizes asymmetric replication: an arc gets enough replicas
	// that each carries at most this fraction of the mean task load from it.
	// At one half an arc puts at most half the mean on each replica (while
	// MaxRedundancy allows), leaving the task room for its other arcs,
	// which vnode adaptation balances. Halving it replicates lukewarm arcs too: about
	// twice the extra replicas for a smaller and uneven balance gain on
	// the simulator's traces. At 1 a task holding one hot arc is already
	// at the mean before its other arcs count.
	chHotShare = 0.5
)

// Reasons recorded for the moves of a consistent-hashing decision.
const (
	chRingChanged = "the consistent-hashing ring changed"
	chHotArc      = "the consistent-hashing ring changed; the arc is hot, so it is replicated beyond the minimum redundancy"
	chCooledArc   = "the consistent-hashing ring changed; the arc cooled, so it keeps fewer replicas"
)

// ConsistentHash is load-aware consistent hashing, the Centrifuge-like
// baseline the Slicer paper compares against (OSDI '16, §4.4.4).
//
// Every task owns virtual nodes on a ring over [0, KeySpaceEnd) at
// positions hashed from the task's name and the node's number (XXH64 of
// "name#i", shifted right by one). A key belongs to the first virtual node
// at or after it, clockwise, and for redundancy r to the tasks of the next
// virtual nodes until r distinct tasks are found.
//
// Replication is asymmetric: an arc (the keys of one virtual node) whose
// measured load is L gets ceil(L / (chHotShare × mean task load)) tasks,
// clamped to [MinRedundancy, MaxRedundancy]: the next distinct tasks
// clockwise, as for the minimum. The mean is the total load over the live tasks; an
// arc's load is shared evenly among its replicas (TaskLoads). With
// MaxRedundancy equal to MinRedundancy every arc gets the minimum.
//
// The number of virtual nodes adapts to load: a task carrying more than the
// mean load loses nodes and one carrying less gains them, in proportion to
// how far it is from the mean (half the step per decision, nothing within
// 5% of the mean), within [16, 400]; a new task starts with 100. No state is
// kept beside the assignment: a task's current count is read back from prev
// as the first node number whose position prev does not give to the task.
// With redundancy 1 a node inside one of its own task's arcs changes
// nothing, so a count read back too high describes the same ring; with more
// replicas it may shift a few of them. Hot arcs carry extra replicas, so a
// node past the real count more often lands in an arc its task serves
// without being its node. A real node ends its arc, so a slice ends right
// after it unless the next arc has the same tasks; a node past the count
// never ends a slice. So in the trailing run of nodes that end no slice,
// the count is cut at the first one inside a slice with more than the
// minimum redundancy. A real node is cut this way only when its arc has
// the same tasks as the next, which then takes it over; at most the
// replicas of the arcs just before it can change.
type ConsistentHash struct{}

// NewConsistentHash returns the consistent-hashing baseline.
func NewConsistentHash() Algorithm { return ConsistentHash{} }

// Name is "consistent-hash".
func (ConsistentHash) Name() string { return AlgorithmConsistentHash }

// Decide builds the ring for the live tasks with counts adapted to the load
// measured under prev, and returns the assignment it induces.
func (ConsistentHash) Decide(job string, prev *Assignment, live []Task, load Load, cfg Config) (*Assignment, Decision, error) {
	tasks, gen, total, err := prepare("consistent-hash", job, prev, live, load, cfg, nil)
	if err != nil {
		return nil, Decision{}, err
	}
	tasks = staying(tasks)
	counts := vnodeCounts(prev, tasks, load, cfg.MinRedundancy)
	base, most := min(cfg.MinRedundancy, len(tasks)), min(cfg.MaxRedundancy, len(tasks))
	var hot float64 // arc load worth one replica; 0 replicates nothing beyond base
	if most > base {
		if total > 0 {
			hot = chHotShare * total / float64(len(tasks))
		}
	}
	next := ringAssignment(job, gen, tasks, counts, base, most, load, hot)
	moves := diffMoves(prev, next, chRingChanged)
	if most > base {
		// Say which moves belong to arcs replicated beyond the minimum.
		for i := range moves {
			m := &moves[i]
			switch {
			case len(next.Slices[next.Find(m.Start)].Tasks) > base:
				m.Reason = chHotArc
			case m.Kind == RemoveReplica && prev != nil && len(prev.Slices[prev.Find(m.Start)].Tasks) > base:
				m.Reason = chCooledArc
			}
		}
	}
	return next, decision(prev, next, moves), nil
}

// vnodePos is the ring position of task name's virtual node i.
func vnodePos(buf []byte, name string, i int) ([]byte, SliceKey) {
	buf = append(buf[:0], name...)
	buf = append(buf, '#')
	buf = strconv.AppendInt(buf, int64(i), 10)
	return buf, xxhash.Sum64(buf) >> 1
}

// serves reports whether a gives key k to the task called name.
func serves(a *Assignment, k SliceKey, name string) bool {
	_, ok := slices.BinarySearch(a.Slices[a.Find(k)].Tasks, name)
	return ok
}

// vnodeCounts returns the virtual-node count of each task of live; minR is
// the job's minimum redundancy, which tells extra replicas in prev apart.
func vnodeCounts(prev *Assignment, live []Task, load Load, minR int) []int {
	counts := make([]int, len(live))
	for i := range counts {
		counts[i] = chBaseVnodes
	}
	if prev == nil {
		return counts
	}
	var loads []float64
	if load.Total() > 0 {
		loads = TaskLoads(prev, load)
	}
	var sum float64
	var known int
	var buf []byte
	// Slices served by more than the minimum hold extra replicas.
	base := min(minR, len(prev.Tasks))
	replicated := slices.ContainsFunc(prev.Slices, func(s Slice) bool { return len(s.Tasks) > base })
	inPrev := make([]int, len(live)) // index in prev.Tasks, or -1
	for i, t := range live {
		inPrev[i] = -1
		pi, ok := prev.TaskIndex(t.Name)
		if !ok {
			continue
		}
		inPrev[i] = pi
		c := 0
		for ; c < chMaxVnodes; c++ {
			var pos SliceKey
			buf, pos = vnodePos(buf, t.Name, c)
			if !serves(prev, pos, t.Name) {
				break
			}
		}
		if replicated {
			// Nodes past the real count end no slice: drop the trailing
			// run of such nodes from its first one inside a replicated
			// arc (see ConsistentHash).
			cut := c
			for j := c - 1; j >= 0; j-- {
				var pos SliceKey
				buf, pos = vnodePos(buf, t.Name, j)
				s := &prev.Slices[prev.Find(pos)]
				if s.End == pos+1 {
					break
				}
				if len(s.Tasks) > base {
					cut = j
				}
			}
			c = cut
		}
		counts[i] = max(c, chMinVnodes)
		if loads != nil {
			sum += loads[pi]
			known++
		}
	}
	if loads == nil || known == 0 || sum == 0 {
		return counts
	}
	mean := sum / float64(known)
	for i, pi := range inPrev {
		if pi < 0 {
			continue
		}
		ratio := 2.0
		if l := loads[pi]; l > 0 {
			ratio = min(max(mean/l, 0.5), 2)
		}
		if math.Abs(ratio-1) <= chDeadband {
			continue
		}
		c := math.Round(float64(counts[i]) * (1 + chGain*(ratio-1)))
		counts[i] = int(min(max(c, chMinVnodes), chMaxVnodes))
	}
	return counts
}

// vnode is one virtual node on the ring.
type vnode struct {
	pos  SliceKey
	task int32
}

// ringAssignment decodes the ring of live's virtual nodes into slices,
// merging adjacent ones that have the same tasks. Every arc gets base
// tasks, or with hot > 0 one per hot units of its load under load, up to
// most.
func ringAssignment(job string, gen uint64, live []Task, counts []int, base, most int, load Load, hot float64) *Assignment {
	total := 0
	for _, c := range counts {
		total += c
	}
	ring := make([]vnode, 0, total)
	var buf []byte
	for t, c := range counts {
		for i := range c {
			var pos SliceKey
			buf, pos = vnodePos(buf, live[t].Name, i)
			ring = append(ring, vnode{pos: pos, task: int32(t)})
		}
	}
	slices.SortFunc(ring, func(a, b vnode) int {
		if c := cmp.Compare(a.pos, b.pos); c != 0 {
			return c
		}
		return cmp.Compare(a.task, b.task)
	})
	// On equal positions the first node owns the key; drop the rest.
	ring = slices.CompactFunc(ring, func(a, b vnode) bool { return a.pos == b.pos })

	// replicas is the task count of an arc carrying arcLoad.
	replicas := func(arcLoad float64) int {
		if hot <= 0 {
			return base
		}
		// Compared as floats: a huge load must not overflow the int.
		return int(min(max(math.Ceil(arcLoad/hot), float64(base)), float64(most)))
	}
	// owners fills scratch with the sorted tasks of node j and its
	// successors, r of them; add copies it only when it starts a new slice.
	scratch := make([]int32, 0, max(base, most))
	owners := func(j, r int) []int32 {
		ts := scratch[:0]
		for k := 0; len(ts) < r && k < len(ring); k++ {
			t := ring[(j+k)%len(ring)].task
			if !slices.Contains(ts, t) {
				ts = append(ts, t)
			}
		}
		slices.Sort(ts)
		return ts
	}
	p := &planner{live: live}
	var sl []wslice
	add := func(start, end SliceKey, ts []int32) {
		if start >= end {
			return
		}
		if n := len(sl); n > 0 && slices.Equal(p.tasks(&sl[n-1]), ts) {
			sl[n-1].end = end
			return
		}
		s := wslice{start: start, end: end}
		p.setTasks(&s, ts)
		sl = append(sl, s)
	}
	// Node j owns (pos[j-1], pos[j]]; node 0 also owns the wrap-around.
	last := ring[len(ring)-1].pos + 1
	r := base
	if hot > 0 {
		r = replicas(load.In(0, ring[0].pos+1) + load.In(last, KeySpaceEnd))
	}
	first := slices.Clone(owners(0, r))
	add(0, ring[0].pos+1, first)
	cur := loadCursor{l: load}
	for j := 1; j < len(ring); j++ {
		start, end := ring[j-1].pos+1, ring[j].pos+1
		if hot > 0 {
			r = replicas(cur.in(start, end))
		}
		add(start, end, owners(j, r))
	}
	add(last, KeySpaceEnd, first)

	p.slices = sl
	return p.assignment(job, gen)
}

// loadCursor sums a Load over ranges given in increasing order, in one
// pass instead of a search per range.
type loadCursor struct {
	l Load
	i int // first entry that may end after the next range starts
}

// in is l.In(start, end), for start at or after the previous call's end.
func (c *loadCursor) in(start, end SliceKey) float64 {
	for c.i < len(c.l) && c.l[c.i].End <= start {
		c.i++
	}
	var sum float64
	for k := c.i; k < len(c.l) && c.l[k].Start < end; k++ {
		sum += c.l[k].within(start, end)
	}
	return sum
}

// Changes is the decision that goes from prev to next, each change of a
// range's tasks recorded as a move with reason.
func Changes(prev, next *Assignment, reason string) Decision {
	return decision(prev, next, diffMoves(prev, next, reason))
}

// diffMoves records what changed from prev to next as moves with reason.
func diffMoves(prev, next *Assignment, reason string) []Move {
	var moves []Move
	if prev == nil {
		for _, s := range next.Slices {
			for _, t := range s.Tasks {
				moves = append(moves, Move{Kind: Reassign, Start: s.Start, End: s.End, To: t, Reason: reason})
			}
		}
		return moves
	}
	overlaps(prev.Slices, next.Slices, func(ps, ns *Slice, lo, hi SliceKey) {
		if !slices.Equal(ps.Tasks, ns.Tasks) {
			var gone, came []string
			for _, t := range ps.Tasks {
				if _, ok := slices.BinarySearch(ns.Tasks, t); !ok {
					gone = append(gone, t)
				}
			}
			for _, t := range ns.Tasks {
				if _, ok := slices.BinarySearch(ps.Tasks, t); !ok {
					came = append(came, t)
				}
			}
			for ; len(gone) > 0 && len(came) > 0; gone, came = gone[1:], came[1:] {
				moves = append(moves, Move{Kind: Reassign, Start: lo, End: hi, From: gone[0], To: came[0], Reason: reason})
			}
			for _, t := range came {
				moves = append(moves, Move{Kind: AddReplica, Start: lo, End: hi, To: t, Reason: reason})
			}
			for _, t := range gone {
				moves = append(moves, Move{Kind: RemoveReplica, Start: lo, End: hi, From: t, Reason: reason})
			}
		}
	})
	return moves
}
