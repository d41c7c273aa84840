package assign

import (
	"errors"
	"fmt"
	"math"
)

// ErrUnknownAlgorithm marks an algorithm name AlgorithmByName does not know.
var ErrUnknownAlgorithm = errors.New("assign: unknown algorithm")

// Names of the algorithms AlgorithmByName knows.
const (
	AlgorithmWeightedMove   = "weighted-move"
	AlgorithmStatic         = "static"
	AlgorithmConsistentHash = "consistent-hash"
)

// AlgorithmNames lists every name AlgorithmByName accepts.
func AlgorithmNames() []string {
	return []string{AlgorithmWeightedMove, AlgorithmStatic, AlgorithmConsistentHash}
}

// AlgorithmByName returns the algorithm called name.
func AlgorithmByName(name string) (Algorithm, error) {
	switch name {
	case AlgorithmWeightedMove:
		return NewWeightedMove(), nil
	case AlgorithmStatic:
		return NewStatic(), nil
	case AlgorithmConsistentHash:
		return NewConsistentHash(), nil
	}
	return nil, fmt.Errorf("%w: %q; use one of %q", ErrUnknownAlgorithm, name, AlgorithmNames())
}

// prepare validates the inputs every Decide shares and returns the live
// tasks sorted by name, the next generation and the load's total, which
// validating it adds up. When refs is not nil and there is prev, it sets
// *refs to prev's slices' tasks as indices into prev.Tasks (see
// Assignment.validate), written into the buffers *refs held where they
// fit; algorithms that do not read them pass nil and are spared them.
func prepare(op, job string, prev *Assignment, live []Task, load Load, cfg Config, refs *taskRefs) (tasks []Task, gen uint64, total float64, err error) {
	if err := ValidateJobName(job); err != nil {
		return nil, 0, 0, fmt.Errorf("%s: %w", op, err)
	}
	gen = 1
	if prev != nil {
		var buf taskRefs
		if refs != nil {
			buf, *refs = *refs, nil
		}
		r, err := prev.validateInto(refs != nil, buf)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("%s: previous assignment: %w", op, err)
		}
		if refs != nil {
			*refs = r
		}
		if prev.Job != job {
			return nil, 0, 0, fmt.Errorf("%s: %w: the previous assignment is of job %q, not %q", op, ErrInvalidAssignment, prev.Job, job)
		}
		if prev.Generation == math.MaxUint64 {
			return nil, 0, 0, fmt.Errorf("%s: %w: job %q: generation %d cannot be incremented; recreate the job", op, ErrInvalidAssignment, job, prev.Generation)
		}
		gen = prev.Generation + 1
	}
	if err := cfg.Validate(); err != nil {
		return nil, 0, 0, fmt.Errorf("%s job %q: %w", op, job, err)
	}
	if total, err = load.validTotal(); err != nil {
		return nil, 0, 0, fmt.Errorf("%s job %q: %w", op, job, err)
	}
	if tasks, err = sortedTasks(job, cfg.Controls(live)); err != nil {
		return nil, 0, 0, fmt.Errorf("%s: %w", op, err)
	}
	return tasks, gen, total, nil
}

// decision records the outcome of going from prev to next.
func decision(prev, next *Assignment, moves []Move) Decision {
	d := Decision{Changed: !Equal(prev, next), Moves: moves}
	if d.Changed {
		d.Churn = Churn(prev, next)
	}
	return d
}

// startFrom returns the assignment a decision of op starts from, and the
// moves that made it: prev, or, without prev or when no task of prev is
// live, an even split of the key space over the open tasks (which the
// decision's phases then go through as any assignment: pins, minimum
// redundancy). *refs becomes the split's task references when it is one.
func startFrom(op, job string, gen uint64, prev *Assignment, tasks []Task, cfg Config, refs *taskRefs) (*Assignment, []Move, error) {
	var why string
	switch {
	case prev == nil:
		why = "the job has no assignment yet; splitting the key space evenly"
	case !prev.KeepsTask(staying(tasks)):
		why = "no task of the previous assignment is live; splitting the key space evenly"
	default:
		return prev, nil, nil
	}
	from := evenSplit(job, gen, openTasks(tasks), cfg)
	r, err := from.validate(true)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: even split: %w", op, err) // unreachable: evenSplit builds valid assignments
	}
	*refs = r
	return from, evenSplitMoves(from, why), nil
}

// evenSplitMoves records an even split built from scratch.
func evenSplitMoves(a *Assignment, reason string) []Move {
	var moves []Move
	for _, s := range a.Slices {
		for _, t := range s.Tasks {
			moves = append(moves, Move{Kind: Reassign, Start: s.Start, End: s.End, To: t, Reason: reason, Phase: PhaseEvenSplit})
		}
	}
	return moves
}

// Static is the baseline that ignores load: the key space is cut evenly
// over the live tasks in name order, as Initial does, every decision. It
// moves nothing while the tasks stay the same.
type Static struct{}

// NewStatic returns the static baseline.
func NewStatic() Algorithm { return Static{} }

// Name is "static".
func (Static) Name() string { return AlgorithmStatic }

// Decide splits the key space evenly over live, ignoring prev and load.
func (Static) Decide(job string, prev *Assignment, live []Task, load Load, cfg Config) (*Assignment, Decision, error) {
	tasks, gen, _, err := prepare("static", job, prev, live, load, cfg, nil)
	if err != nil {
		return nil, Decision{}, err
	}
	next := evenSplit(job, gen, staying(tasks), cfg)
	return next, decision(prev, next, diffMoves(prev, next, "splitting the key space evenly over the live tasks")), nil
}
