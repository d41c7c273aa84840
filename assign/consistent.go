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
// The number of virtual nodes adapts to load: a task carrying more than the
// mean load loses nodes and one carrying less gains them, in proportion to
// how far it is from the mean (half the step per decision, nothing within
// 5% of the mean), within [16, 400]; a new task starts with 100. No state is
// kept beside the assignment: a task's current count is read back from prev
// as the first node number whose position prev does not give to the task.
// With redundancy 1 a node inside one of its own task's arcs changes
// nothing, so a count read back too high describes the same ring; with more
// replicas it may shift a few of them.
type ConsistentHash struct{}

// NewConsistentHash returns the consistent-hashing baseline.
func NewConsistentHash() Algorithm { return ConsistentHash{} }

// Name is "consistent-hash".
func (ConsistentHash) Name() string { return AlgorithmConsistentHash }

// Decide builds the ring for the live tasks with counts adapted to the load
// measured under prev, and returns the assignment it induces.
func (ConsistentHash) Decide(job string, prev *Assignment, live []Task, load Load, cfg Config) (*Assignment, Decision, error) {
	tasks, gen, err := prepare("consistent-hash", job, prev, live, load, cfg)
	if err != nil {
		return nil, Decision{}, err
	}
	counts := vnodeCounts(prev, tasks, load)
	next := ringAssignment(job, gen, tasks, counts, min(cfg.MinRedundancy, len(tasks)))
	return next, decision(prev, next, diffMoves(prev, next, "the consistent-hashing ring changed")), nil
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

// vnodeCounts returns the virtual-node count of each task of live.
func vnodeCounts(prev *Assignment, live []Task, load Load) []int {
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
// merging adjacent ones that have the same tasks.
func ringAssignment(job string, gen uint64, live []Task, counts []int, r int) *Assignment {
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

	// owners fills scratch with the sorted tasks of node j and its
	// successors; add copies it only when it starts a new slice.
	scratch := make([]int32, 0, r)
	owners := func(j int) []int32 {
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
	var sl []wslice
	add := func(start, end SliceKey, ts []int32) {
		if start >= end {
			return
		}
		if n := len(sl); n > 0 && slices.Equal(sl[n-1].tasks, ts) {
			sl[n-1].end = end
			return
		}
		sl = append(sl, wslice{start: start, end: end, tasks: slices.Clone(ts)})
	}
	// Node j owns (pos[j-1], pos[j]]; node 0 also owns the wrap-around.
	first := slices.Clone(owners(0))
	add(0, ring[0].pos+1, first)
	for j := 1; j < len(ring); j++ {
		add(ring[j-1].pos+1, ring[j].pos+1, owners(j))
	}
	add(ring[len(ring)-1].pos+1, KeySpaceEnd, first)

	p := &planner{live: live, slices: sl}
	return p.assignment(job, gen)
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
