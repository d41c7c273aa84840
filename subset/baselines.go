package subset

// Random returns frontend's k backends by random subsetting: the backends
// shuffled by a generator seeded with frontend, first k taken. It is a
// baseline: frontends do not coordinate, so connections are unevenly
// spread, and the shuffle depends on n, so any change of n reshuffles every
// subset. Same conventions as Rocksteadier.
func Random(frontend uint64, n, k int) []int {
	if n <= 0 || k <= 0 {
		return nil
	}
	k = min(k, n)
	all := identity(n)
	r := rng{state: frontend}
	partialShuffle(all, k, &r)
	return all[:k:k]
}

// Deterministic returns frontend's k backends by Google's classic
// deterministic subsetting (Site Reliability Engineering, chapter 20, with
// the leftovers balanced). Frontends form rounds of n/k; each round sets
// aside n mod k backends as leftovers, chosen round-robin by round number
// so every backend is left out equally often, shuffles the rest with a
// generator seeded by the round number, and hands each frontend of the
// round the next k. Connections are balanced and subsets diverse, but the
// rounds depend on n and k, so changing either reshuffles nearly every
// subset. Same conventions as Rocksteadier.
func Deterministic(frontend uint64, n, k int) []int {
	if n <= 0 || k <= 0 {
		return nil
	}
	k = min(k, n)
	perRound := uint64(n / k)
	round := frontend / perRound
	slot := int(frontend % perRound)
	left := n % k

	rest := make([]int, 0, n-left)
	first := int((round % uint64(n)) * uint64(left) % uint64(n)) // first leftover
	for i := range n {
		if (i-first+n)%n >= left {
			rest = append(rest, i)
		}
	}
	r := rng{state: round}
	partialShuffle(rest, (slot+1)*k, &r)
	return rest[slot*k : (slot+1)*k : (slot+1)*k]
}

func identity(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// partialShuffle puts a uniformly random ordered sample of s in s[:upto]
// (a Fisher–Yates shuffle stopped early), so a shorter prefix of the same
// draw is a prefix of a longer one.
func partialShuffle(s []int, upto int, r *rng) {
	for i := 0; i < upto && i < len(s)-1; i++ {
		j := i + r.below(len(s)-i)
		s[i], s[j] = s[j], s[i]
	}
}
