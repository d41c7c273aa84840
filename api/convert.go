package api

import (
	"fmt"
	"math"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
)

// ToProto converts a model assignment to its wire form. The message's
// slices share the assignment's task lists (windows with no room to
// append), as the assignment's slices share them with each other: a
// million slices are not a million lists again. Neither side may write
// them (see assign.Slice).
func ToProto(a *assign.Assignment) *slicerv1.Assignment {
	if a == nil {
		return nil
	}
	p := &slicerv1.Assignment{
		Job:         a.Job,
		Generation:  a.Generation,
		Incarnation: a.Incarnation,
		Tasks:       make([]*slicerv1.Task, len(a.Tasks)),
		Slices:      make([]*slicerv1.Slice, len(a.Slices)),
	}
	for i, t := range a.Tasks {
		p.Tasks[i] = &slicerv1.Task{Name: t.Name, Address: t.Addr}
	}
	for i, s := range a.Slices {
		p.Slices[i] = &slicerv1.Slice{Start: s.Start, End: s.End, Tasks: s.Tasks[:len(s.Tasks):len(s.Tasks)]}
	}
	return p
}

// FromProto converts a wire assignment to the model and validates it, so a
// malformed message from the network never reaches a routing table.
func FromProto(p *slicerv1.Assignment) (*assign.Assignment, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: message has no assignment", assign.ErrInvalidAssignment)
	}
	a := &assign.Assignment{
		Job:         p.GetJob(),
		Generation:  p.GetGeneration(),
		Incarnation: p.GetIncarnation(),
		Tasks:       make([]assign.Task, len(p.GetTasks())),
		Slices:      make([]assign.Slice, len(p.GetSlices())),
	}
	for i, t := range p.GetTasks() {
		a.Tasks[i] = assign.Task{Name: t.GetName(), Addr: t.GetAddress()}
	}
	// Slices naming the same tasks share a list, spelled with the task
	// table's strings: the message's million copies of names are not kept.
	lists := assign.NewTaskLists(a.Tasks)
	lists.Reserve(multiNames(p.GetSlices()))
	for i, s := range p.GetSlices() {
		a.Slices[i] = assign.Slice{Start: s.GetStart(), End: s.GetEnd(), Tasks: lists.Of(s.GetTasks())}
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return a, nil
}

// multiNames is how many names the slices of two tasks or more among ps
// hold (what assign.TaskLists.Reserve takes).
func multiNames(ps []*slicerv1.Slice) int {
	n := 0
	for _, p := range ps {
		if k := len(p.GetTasks()); k > 1 {
			n += k
		}
	}
	return n
}

// ConfigToProto converts a job configuration to its wire form. Tuning
// fields keep their stored value, zero meaning the default.
func ConfigToProto(c assign.Config) *slicerv1.JobConfig {
	return &slicerv1.JobConfig{
		MinRedundancy:     clampUint32(c.MinRedundancy),
		MaxRedundancy:     clampUint32(c.MaxRedundancy),
		MinSlicesPerTask:  clampUint32(c.MinSlicesPerTask),
		MaxSlicesPerTask:  clampUint32(c.MaxSlicesPerTask),
		MergeChurn:        c.MergeChurn,
		MoveChurn:         c.MoveChurn,
		MergeLoadFactor:   c.MergeLoadFactor,
		SplitLoadFactor:   c.SplitLoadFactor,
		SuppressBelow:     c.SuppressBelow,
		MaxSlices:         clampUint32(c.MaxSlices),
		Consistency:       consistencyToProto(c.Consistency),
		Algorithm:         c.Algorithm,
		Frozen:            c.Frozen,
		DrainedTasks:      c.Drained,
		CordonedTasks:     c.Cordoned,
		Pins:              pinsToProto(c.Pins),
		HandoffDeadlineMs: uint32(c.HandoffDeadlineMS),
		Victim:            c.Victim,
	}
}

// consistencyToProto writes affinity, the default, as the unset value, so
// that configurations from before the field round-trip unchanged.
func consistencyToProto(c assign.Consistency) slicerv1.Consistency {
	if c == assign.Strong {
		return slicerv1.Consistency_CONSISTENCY_STRONG
	}
	return slicerv1.Consistency_CONSISTENCY_UNSPECIFIED
}

// clampUint32 keeps an out-of-range count out of the wire form; a valid
// configuration never has one.
func clampUint32(n int) uint32 {
	return uint32(min(max(n, 0), math.MaxUint32))
}

// maxAlgorithmName bounds JobConfig.algorithm before it is looked up.
const maxAlgorithmName = 64

// ConfigFromProto converts and validates a wire job configuration.
func ConfigFromProto(p *slicerv1.JobConfig) (assign.Config, error) {
	if p == nil {
		return assign.Config{}, fmt.Errorf("%w: request has no config; send at least min_redundancy and max_redundancy", assign.ErrInvalidConfig)
	}
	// Checked before the conversion to int, which could wrap on 32-bit
	// platforms; Validate checks everything else.
	if p.GetMinRedundancy() > assign.MaxRedundancyLimit || p.GetMaxRedundancy() > assign.MaxRedundancyLimit {
		return assign.Config{}, fmt.Errorf("%w: redundancy %d/%d is above the limit of %d", assign.ErrInvalidConfig, p.GetMinRedundancy(), p.GetMaxRedundancy(), assign.MaxRedundancyLimit)
	}
	for _, f := range []struct {
		name string
		v    uint32
	}{{"min slices per task", p.GetMinSlicesPerTask()}, {"max slices per task", p.GetMaxSlicesPerTask()}} {
		if f.v > assign.MaxSlicesPerTaskLimit {
			return assign.Config{}, fmt.Errorf("%w: %s %d is above the limit of %d", assign.ErrInvalidConfig, f.name, f.v, assign.MaxSlicesPerTaskLimit)
		}
	}
	if p.GetMaxSlices() > assign.MaxSlicesLimit {
		return assign.Config{}, fmt.Errorf("%w: max slices %d is above the limit of %d", assign.ErrInvalidConfig, p.GetMaxSlices(), assign.MaxSlicesLimit)
	}
	var consistency assign.Consistency
	switch p.GetConsistency() {
	case slicerv1.Consistency_CONSISTENCY_UNSPECIFIED, slicerv1.Consistency_CONSISTENCY_AFFINITY:
	case slicerv1.Consistency_CONSISTENCY_STRONG:
		consistency = assign.Strong
	default:
		return assign.Config{}, fmt.Errorf("%w: consistency %d is neither affinity (1) nor strong (2)", assign.ErrInvalidConfig, p.GetConsistency())
	}
	if n := len(p.GetPins()); n > assign.MaxPins {
		return assign.Config{}, fmt.Errorf("%w: %d pins; at most %d may be", assign.ErrInvalidConfig, n, assign.MaxPins)
	}
	for _, l := range [][]string{p.GetDrainedTasks(), p.GetCordonedTasks()} {
		if len(l) > assign.MaxControlledTasks {
			return assign.Config{}, fmt.Errorf("%w: %d drained or cordoned tasks; at most %d may be", assign.ErrInvalidConfig, len(l), assign.MaxControlledTasks)
		}
	}
	if n := len(p.GetVictim()); n > maxAlgorithmName {
		return assign.Config{}, fmt.Errorf("%w: victim policy of %d bytes; use %q or %q", assign.ErrInvalidConfig, n, assign.VictimGainPerKey, assign.VictimGainPerByte)
	}
	if n := len(p.GetAlgorithm()); n > maxAlgorithmName {
		return assign.Config{}, fmt.Errorf("%w: algorithm name of %d bytes; use one of %q", assign.ErrInvalidConfig, n, assign.AlgorithmNames())
	}
	c := assign.Config{
		Algorithm:         p.GetAlgorithm(),
		Frozen:            p.GetFrozen(),
		Drained:           p.GetDrainedTasks(),
		Cordoned:          p.GetCordonedTasks(),
		Pins:              pinsFromProto(p.GetPins()),
		HandoffDeadlineMS: int(min(p.GetHandoffDeadlineMs(), assign.MaxHandoffDeadlineMS+1)),
		Victim:            p.GetVictim(),
		Consistency:       consistency,
		MinRedundancy:     int(p.GetMinRedundancy()),
		MaxRedundancy:     int(p.GetMaxRedundancy()),
		MinSlicesPerTask:  int(p.GetMinSlicesPerTask()),
		MaxSlicesPerTask:  int(p.GetMaxSlicesPerTask()),
		MergeChurn:        p.GetMergeChurn(),
		MoveChurn:         p.GetMoveChurn(),
		MergeLoadFactor:   p.GetMergeLoadFactor(),
		SplitLoadFactor:   p.GetSplitLoadFactor(),
		SuppressBelow:     p.GetSuppressBelow(),
		MaxSlices:         int(p.GetMaxSlices()),
	}
	if err := c.Validate(); err != nil {
		return assign.Config{}, err
	}
	return c, nil
}

func pinsToProto(pins []assign.Pin) []*slicerv1.KeyPin {
	var out []*slicerv1.KeyPin
	for _, p := range pins {
		out = append(out, &slicerv1.KeyPin{Start: uint64(p.Start), End: uint64(p.End), Task: p.Task, Reason: p.Reason})
	}
	return out
}

func pinsFromProto(pins []*slicerv1.KeyPin) []assign.Pin {
	var out []assign.Pin
	for _, p := range pins {
		out = append(out, assign.Pin{Start: assign.SliceKey(p.GetStart()), End: assign.SliceKey(p.GetEnd()), Task: p.GetTask(), Reason: p.GetReason()})
	}
	return out
}
