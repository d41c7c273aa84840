package assigner

import (
	"github.com/slicerd/slicerd/assign"
)

// decide computes a job's next assignment for a decision taken for why.
//
// Only the periodic load-driven decision moves load. A decision for a
// change of membership or configuration, or a takeover, moves only what it
// must (assign.Membership): a departed task's keys, replicas the
// configuration adds or drops, a joiner's fair share. So a dying task moves
// nothing else, and an Assigner taking over a job whose tasks are all
// still live keeps the stored assignment: the load it has seen by then may
// be partial or measured under an older assignment, and a load decision
// commits only when it lowers the imbalance, after fresh reports (see
// balanceAll). When every key moves anyway (the job's first assignment, or
// no task of the current one live), the algorithm decides with the load at
// once; with load balancing off it never sees load.
//
// A decision for a configuration an operator set (job set) runs the
// algorithm under it with the measured load, and commits whatever it
// changes, so the new slices per task, churn budgets and factors apply at
// once, not only when a later load decision also lowers the imbalance;
// a frozen job, or one whose membership is still settling, gets the
// membership decision instead.
//
// A frozen job (assign.Config.Frozen) takes no load-driven decision at
// all. A load-driven decision taken while the live tasks differ from the
// current assignment's changes nothing: the membership decision that the
// same change armed goes first, and load moves at a later tick.
func (a *Assigner) decide(name string, cur *assign.Assignment, live []assign.Task, load assign.Load, cfg assign.Config, why trigger) (*assign.Assignment, assign.Decision, error) {
	switch {
	case why == triggerLoad && (cfg.Frozen || !cur.Settled(cfg.Controls(live))):
		return cur, assign.Decision{}, nil
	case why == triggerConfig && !cfg.Frozen && cur.Settled(cfg.Controls(live)):
		return algorithmOf(cfg).Decide(name, cur, live, load, cfg)
	case why == triggerLoad || a.interval == 0 || !cur.KeepsTask(live):
		return algorithmOf(cfg).Decide(name, cur, live, load, cfg)
	}
	return assign.Membership(name, cur, live, load, cfg)
}

// algorithmOf returns the job's algorithm (assign.Config.Algorithm,
// weighted-move by default). A stored configuration was validated, so the
// name is known; one that is not (written by a newer slicerd) falls back
// to weighted-move rather than stopping the job's decisions.
func algorithmOf(cfg assign.Config) assign.Algorithm {
	if cfg.Algorithm != "" {
		if alg, err := assign.AlgorithmByName(cfg.Algorithm); err == nil {
			return alg
		}
	}
	return assign.NewWeightedMove()
}
