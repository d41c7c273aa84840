package assign

// ConsistentHash is load-aware consistent hashing (OSDI '16, §4.4.4).
type ConsistentHash struct{}

// NewConsistentHash returns the consistent-hashing baseline.
func NewConsistentHash() Algorithm { return ConsistentHash{} }

// Name is "consistent-hash".
func (ConsistentHash) Name() string { return AlgorithmConsistentHash }

// Decide computes the next assignment.
func (ConsistentHash) Decide(job string, prev *Assignment, live []Task, load Load, cfg Config) (*Assignment, Decision, error) {
	return Static{}.Decide(job, prev, live, load, cfg)
}
