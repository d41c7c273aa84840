package assign

// WeightedMove is Slicer's weighted-move algorithm (OSDI '16, §4.4.1).
type WeightedMove struct{}

// NewWeightedMove returns the weighted-move algorithm.
func NewWeightedMove() Algorithm { return WeightedMove{} }

// Name is "weighted-move".
func (WeightedMove) Name() string { return AlgorithmWeightedMove }

// Decide computes the next assignment.
func (WeightedMove) Decide(job string, prev *Assignment, live []Task, load Load, cfg Config) (*Assignment, Decision, error) {
	tasks, gen, err := prepare("weighted-move", job, prev, live, load, cfg)
	if err != nil {
		return nil, Decision{}, err
	}
	if prev == nil {
		next := evenSplit(job, gen, tasks, cfg)
		return next, decision(nil, next, evenSplitMoves(next, "the job has no assignment yet; splitting the key space evenly")), nil
	}
	return Rebalance(prev, tasks, cfg)
}
