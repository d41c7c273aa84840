package assign

import "math"

// MinImbalanceGain is how much a load-driven decision must lower the
// imbalance (ImbalanceWith, under the measured load) to be worth
// committing at all. Weighted-move keeps trading cold slices between
// merges and splits even when balance cannot improve; without a floor,
// every decision would publish a generation that changes nothing anyone
// could measure.
const MinImbalanceGain = 0.01

// NoiseFalseCommitRate is how often, at most, a load-driven decision
// on a perfectly even job may pass SignificantGain on sampling noise
// alone: about once in 20,000 decisions, so about once a day for a
// job decided every five seconds. The hottest of a job's n tasks is
// measured, the most extreme of n noisy counts, so the gate asks for
// NoiseSigmas(n) standard errors: 3.9 for one task, 4.1 for two, 4.15
// for three, 4.9 for a hundred and 5.7 for ten thousand
// (TestSignificantGainIgnoresSamplingNoise counts the windows of even
// jobs of 2 to 1,000 tasks that pass).
const NoiseFalseCommitRate = 5e-5

// NoiseSigmas is how many standard errors of sampling noise the gain of
// a load-driven decision on a job of n tasks must exceed: the normal
// quantile that n independent counts all stay below with probability
// 1 − NoiseFalseCommitRate (a union bound).
func NoiseSigmas(n int) float64 {
	return math.Sqrt2 * math.Erfcinv(2*NoiseFalseCommitRate/float64(max(n, 1)))
}

// Evidence is what a measured imbalance rests on: the count of reports
// (requests) that the hottest task's load sums, that task's share of the
// job's capacity (its capacity over the sum of its job's tasks'; 1/n for
// n tasks of equal capacity), and how many tasks it was the hottest of.
// Zero values are unknown.
type Evidence struct {
	Events float64
	Share  float64
	Tasks  int
}

// SignificantGain reports whether lowering the imbalance from before to
// after is worth a commit: at least MinImbalanceGain, and, when the
// hottest task's load is known to be the sum of e.Events reports, more
// than NoiseSigmas(e.Tasks) times the sampling noise of the imbalance.
//
// The noise is the spread the hottest task's count would have if the
// job were already as even as after claims: its share of the job's
// events would be p = after × e.Share, and a binomial count of that
// share of the job's e.Events / (e.Share × before) events errs, in units
// of imbalance, by
//
//	√(before × after × (1 − p) / e.Events)
//
// which is taken with 1 − e.Share for 1 − p: never smaller, and growing
// with after, so that no after above 1 can pass where a perfect balance
// (after 1) does not (what the Assigner's futile check relies on).
// With ~170 requests per task and window, the measured imbalance of
// three even tasks wanders by about 6%, and moving keys to "fix" it
// moves them for nothing. Where the hottest task carries nearly all of a
// job's load, the count itself is the evidence: every one of 24 requests
// on one of two tasks is a gain from 2 to 1 that chance explains once in
// eight million windows, and the gate passes it, where a noise term of
// before/√events, blind to the share, would have called it noise (a
// decision moves no more than its churn budget, though, so at such
// rates each of its steps must pass on its own). Costs that vary from
// request to request only add noise, so the gate errs towards
// committing.
func SignificantGain(before, after float64, e Evidence) bool {
	margin := MinImbalanceGain
	if e.Events > 0 && before > 0 && after > 0 {
		rest := 1.0
		if e.Share > 0 && e.Share < 1 {
			rest = 1 - e.Share
		}
		margin = max(margin, NoiseSigmas(e.Tasks)*math.Sqrt(before*after*rest/e.Events))
	}
	return before-after >= margin
}

// CapacityShare returns task i of a's share of the capacity of a's tasks
// (capacities from live, 1 for a task live does not list): what
// Evidence.Share is for a's hottest task. It returns 0 for an i out of
// range.
func CapacityShare(a *Assignment, live []Task, i int) float64 {
	if a == nil || i < 0 || i >= len(a.Tasks) {
		return 0
	}
	caps := capacities(a, live)
	var sum float64
	for _, c := range caps {
		sum += c
	}
	return caps[i] / sum
}
