package assign

// Membership is the decision for a change of a job's live tasks or of its
// configuration alone, which moves only what it must: the keys of departed
// tasks go to the least-loaded live tasks, every slice gets between
// min(MinRedundancy, live tasks) and MaxRedundancy tasks, and tasks that
// hold nothing take their fair share of the key space (phases 1 and 2 of
// WeightedMove, weighing every key the same). Of load it reads only the
// bytes: where tasks have memory limits it places each slice on a task
// with room, and moves slices off tasks past their limits. Nothing else
// moves and no slice is merged, so the load measured under prev still
// describes the result, and with the same live tasks and configuration and
// every task within its memory limit the result is prev under the next
// generation. Moving load is left to a later WeightedMove decision.
//
// Without prev, or when no task of prev is live, the key space is split
// evenly over the open tasks, and the same phases then apply the pins and
// the minimum redundancy to that split.
func Membership(job string, prev *Assignment, live []Task, load Load, cfg Config) (*Assignment, Decision, error) {
	var refs taskRefs
	tasks, gen, _, err := prepare("membership", job, prev, live, load, cfg, &refs)
	if err != nil {
		return nil, Decision{}, err
	}
	from, base, err := startFrom("membership", job, gen, prev, tasks, cfg, &refs)
	if err != nil {
		return nil, Decision{}, err
	}
	p := newPlanner(from, refs, tasks, cfg.WithDefaults())
	p.moves = base
	p.mem = newMemory(p, load)
	p.membershipPhases()
	next := p.assignment(job, gen)
	return next, decision(prev, next, p.moves), nil
}
