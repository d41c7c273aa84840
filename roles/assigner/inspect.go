package assigner

import "github.com/slicerd/slicerd/assign"

// What an Assigner reports of its state, for the agent, its metrics and
// tests; none of it changes anything.

// Current is the assignment the Assigner serves for job, nil when it
// holds none.
func (a *Assigner) Current(job string) *assign.Assignment {
	a.mu.Lock()
	j := a.jobs[job]
	a.mu.Unlock()
	if j == nil {
		return nil
	}
	return j.pub.Current()
}

// JobLoad is job's load as the Assigner would decide on it now: the
// latest reports of its live tasks, merged.
func (a *Assigner) JobLoad(job string) assign.Load { return a.jobLoad(job) }

// LiveTasks are the names of job's tasks alive in gossip.
func (a *Assigner) LiveTasks(job string) []string { return a.liveTaskNames(job) }

// Reporting counts the tasks of job whose load report the Assigner holds.
func (a *Assigner) Reporting(job string) int { return a.loads.reporting(job) }

// HasReport reports whether the Assigner holds a load report of task.
func (a *Assigner) HasReport(job, task string) bool {
	a.loads.mu.Lock()
	defer a.loads.mu.Unlock()
	_, ok := a.loads.jobs[job][task]
	return ok
}

// RefusedReports counts the load reports refused over a task's rate.
func (a *Assigner) RefusedReports() uint64 { return a.reports.refused.Load() }

// Counting reports whether the Assigner counts its commits and
// decisions: whether Collectors was called.
func (a *Assigner) Counting() bool { return a.storeMetrics != nil || a.metrics != nil }
