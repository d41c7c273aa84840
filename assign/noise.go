package assign

import "math"

// MinImbalanceGain is how much a load-driven decision must lower the
// imbalance (ImbalanceWith, under the measured load) to be worth
// committing at all. Weighted-move keeps trading cold slices between
// merges and splits even when balance cannot improve; without a floor,
// every decision would publish a generation that changes nothing anyone
// could measure.
const MinImbalanceGain = 0.01

// NoiseSigmas is how many standard errors of sampling noise a
// load-driven decision's gain must exceed (SignificantGain).
const NoiseSigmas = 3

// SignificantGain reports whether lowering the imbalance from before to
// after is worth a commit: at least MinImbalanceGain, and, when the
// hottest task's measured load is the sum of events reports (requests),
// more than NoiseSigmas times the imbalance's sampling noise. A count of
// n events errs by about √n (Poisson), so the hottest task's load, and
// with it the imbalance, by a fraction 1/√n: with ~170 requests per task
// and window the measured imbalance of a perfectly even job wanders by
// about 8%, and moving keys to "fix" it moves them for nothing. events 0
// means unknown: the floor alone applies. Costs that vary from request to
// request only add noise, so the gate errs towards committing.
func SignificantGain(before, after, events float64) bool {
	margin := MinImbalanceGain
	if events > 0 {
		margin = max(margin, NoiseSigmas*before/math.Sqrt(events))
	}
	return before-after >= margin
}
