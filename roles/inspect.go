package roles

// PreferredAssigner returns the Assigner this agent currently prefers for
// job: its Assigner's choice, or its Distributor's when it runs no
// Assigner; "" when it has made none. Tests and operators use it to see
// where a job is generated.
func (a *Agent) PreferredAssigner(job string) string {
	switch {
	case a.assigner != nil:
		return a.assigner.Preferred(job)
	case a.distributor != nil:
		return a.distributor.Preferred(job)
	}
	return ""
}

// Leads reports whether this agent's Assigner holds job's lease and has
// taken the job over under it: it generates the job's assignments.
func (a *Agent) Leads(job string) bool {
	if a.assigner == nil {
		return false
	}
	return a.assigner.Leads(job)
}

// PullsFrom returns the name of the Assigner this agent's Distributor
// streams job from, "" while it has no stream for it.
func (a *Agent) PullsFrom(job string) string {
	if a.distributor == nil {
		return ""
	}
	return a.distributor.PullsFrom(job)
}

// ForwardedWrites counts the load reports and configuration changes this
// agent's Assigner forwarded to another, preferred, Assigner.
func (a *Agent) ForwardedWrites() uint64 {
	if a.assigner == nil {
		return 0
	}
	return a.assigner.Forwarded()
}

// Relays counts the streams of job this agent's Distributor serves to
// relay Distributors (which it sends each generation first); 0 when it
// runs no Distributor or does not serve the job.
func (a *Agent) Relays(job string) int {
	if a.distributor == nil {
		return 0
	}
	return a.distributor.Relays(job)
}
