package assign

import "sync"

// scratch is a weighted-move decision's working memory: prev's task
// references as validation returns them, the planner's slices and arena
// of task lists, the slices' loads, phase 4's lists of each task's
// slices, phase 5's marks and pieces, and the moves as they are
// recorded. It is about 86 bytes a slice (89 MB at a million slices; up
// to about 195 when phase 5 first refines a job of a few slices a task:
// BenchmarkDecisionScratch), which every decision would otherwise
// allocate and zero afresh, and which the collector would then reclaim
// (an Assigner deciding a job of that size every few seconds would
// collect about once a decision).
//
// Decisions take one from scratchPool and put it back when they are done;
// none of it outlives the decision: the assignment and the moves decided
// hold none of its memory (the moves are copied out, once, at their final
// length, and the buffer cleared). A pool keeps a scratch across at most one
// collection after its last use, so an idle process does not hold it.
// Buffers are not zeroed between decisions: whoever takes one writes
// every element it reads, or clears it (TestDecisionsOnDirtyScratch
// poisons them).
type scratch struct {
	refs   taskRefs // prev's, as prepare returns them (by part)
	slices []wslice
	ids    []int32
	prevOf []int32
	sload  []float64
	owned  []ownedSlice
	marks  []int8
	pieces [][]piece // by part
	joined []piece
	// Phase 5's pass hottest first: its heap, final pieces, and those
	// pieces by key (with the ends of each slice's group).
	heap, done, sorted []piece
	ends               []int32
	moves              []Move // recorded, then copied out (cleared)
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// reuse returns the buffer at *buf with length n when it has a capacity
// of at least c (its elements as the last user left them), else a new
// zeroed slice of length n and capacity c; a buffer that was too small is
// replaced by one of an eighth more than c, so that a job whose decisions
// differ a little in size finds it large enough next time. *buf is left
// empty, since a buffer has one user at a time; the caller gives it back
// by storing the slice (or what it grew into) at *buf.
func reuse[T any](buf *[]T, n, c int) []T {
	b := *buf
	*buf = nil
	if cap(b) >= c {
		return b[:n]
	}
	if cap(b) > 0 {
		c += c / 8
	}
	return make([]T, n, c)
}
