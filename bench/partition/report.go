package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/slicerd/slicerd/bench/internal/benchproc"
	"github.com/slicerd/slicerd/lease/leasecheck"
)

type report struct {
	Command         string  `json:"command"`
	Seconds         float64 `json:"seconds"`
	DeadlineS       float64 `json:"deadline_s"`
	ConvergeWithinS float64 `json:"converge_within_s"`

	Faults []faultReport `json:"faults"`
	// Skipped lists the faults that found no target (a lease holder).
	Skipped []string `json:"skipped,omitempty"`

	// The affinity job: requests scheduled outside every fault window,
	// and those of them not answered by an owner in time.
	AffinityScheduled  uint64              `json:"affinity_scheduled"`
	AffinitySatisfied  uint64              `json:"affinity_satisfied"`
	OutsideScheduled   int                 `json:"affinity_outside_scheduled"`
	OutsideFailed      int                 `json:"affinity_outside_failed"`
	OutsideRoutedPct   float64             `json:"affinity_outside_routed_pct"`
	OutsideFailedFirst []benchproc.Outcome `json:"affinity_outside_failed_first,omitempty"`

	// The strong job.
	StrongScheduled  uint64   `json:"strong_scheduled"`
	StrongSatisfied  uint64   `json:"strong_satisfied"`
	Recorded         int      `json:"recorded"`
	DoubleOwners     int      `json:"double_owners"`
	TokenRegressions int      `json:"token_regressions"`
	StaleWrites      uint64   `json:"stale_writes_refused"`
	Examples         []string `json:"examples,omitempty"`

	Store []storeHistory `json:"store"`

	// Failures lists every check that failed; none means the run passed.
	Failures []string `json:"failures,omitempty"`
}

// faultReport is one fault's outcome: its window, the time to converge
// after its heal, the affinity job's requests whose life overlapped the
// window and how many failed, and the strong job's violations among the
// requests that started between this fault and the next.
type faultReport struct {
	window
	StartS           float64 `json:"start_s"`
	HealS            float64 `json:"heal_s"`
	ConvergeS        float64 `json:"converge_s"`
	AffinityInWindow int     `json:"affinity_in_window"`
	AffinityFailed   int     `json:"affinity_failed_in_window"`
	StrongRecorded   int     `json:"strong_recorded"`
	DoubleOwners     int     `json:"double_owners"`
	TokenRegressions int     `json:"token_regressions"`
}

// judge fills the report's figures and its failed checks.
func (r *report) judge(o options, ws []window, ops []leasecheck.Op, strong, affinity *benchproc.LoadResult) {
	fail := func(format string, args ...any) { r.Failures = append(r.Failures, fmt.Sprintf(format, args...)) }
	r.Faults = make([]faultReport, len(ws))
	for i, w := range ws {
		fr := faultReport{window: w, StartS: w.Start.Seconds(), HealS: w.Heal.Seconds(), ConvergeS: w.Converge.Seconds()}
		for _, at := range affinity.ScheduledAt {
			if at <= w.End && at+o.deadline >= w.Start {
				fr.AffinityInWindow++
			}
		}
		for _, u := range affinity.Unsatisfied {
			if u.At <= w.End && u.At+o.deadline >= w.Start {
				fr.AffinityFailed++
			}
		}
		var seg []leasecheck.Op
		for _, op := range ops {
			if op.Start >= w.mono && (i+1 == len(ws) || op.Start < ws[i+1].mono) {
				seg = append(seg, op)
			}
		}
		chk := leasecheck.Check(seg)
		fr.StrongRecorded, fr.DoubleOwners, fr.TokenRegressions = chk.Ops, chk.DoubleOwners, chk.TokenRegression
		r.Faults[i] = fr
		switch {
		case !w.Converged:
			fail("%s (%s): %s", w.Name, w.What, w.Error)
		case w.Converge > o.convergeWithin:
			fail("%s (%s): converged %.2f s after the heal, later than %v; it waited for: %s", w.Name, w.What, w.Converge.Seconds(), o.convergeWithin,
				strings.Join(w.Waited, "; "))
		}
	}

	for _, s := range r.Skipped {
		fail("fault %s", s)
	}
	r.AffinityScheduled, r.AffinitySatisfied = affinity.Scheduled, affinity.Satisfied
	for _, at := range affinity.ScheduledAt {
		if outside(ws, at, o.deadline) {
			r.OutsideScheduled++
		}
	}
	for _, u := range affinity.Unsatisfied {
		if outside(ws, u.At, o.deadline) {
			r.OutsideFailed++
			if len(r.OutsideFailedFirst) < 20 {
				r.OutsideFailedFirst = append(r.OutsideFailedFirst, u)
			}
		}
	}
	if r.OutsideScheduled > 0 {
		r.OutsideRoutedPct = 100 * float64(r.OutsideScheduled-r.OutsideFailed) / float64(r.OutsideScheduled)
	}
	switch {
	case r.OutsideScheduled == 0:
		fail("affinity job: no request was scheduled outside the fault windows; lengthen -quiet")
	case r.OutsideRoutedPct < o.minRouted:
		fail("affinity job: %d of %d requests outside the fault windows failed: %.3f%% routed to a live owner, below %.3f%%",
			r.OutsideFailed, r.OutsideScheduled, r.OutsideRoutedPct, o.minRouted)
	}

	r.StrongScheduled, r.StrongSatisfied = strong.Scheduled, strong.Satisfied
	chk := leasecheck.Check(ops)
	r.Recorded, r.DoubleOwners, r.TokenRegressions = chk.Ops, chk.DoubleOwners, chk.TokenRegression
	for _, v := range chk.Examples {
		r.Examples = append(r.Examples, v.String())
	}
	switch {
	case chk.Ops == 0:
		fail("strong job: no satisfied request was recorded, so the history check saw nothing")
	case !chk.OK():
		fail("strong job: %s", chk)
	}
	for _, h := range r.Store {
		if h.Commits == 0 {
			fail("store: job %s has no commit in etcd's history", h.Job)
		}
		for _, v := range h.Violations {
			fail("store: job %s: %s", h.Job, v)
		}
	}
}

func (r *report) printJSON(w io.Writer) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(r)
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "%s\n%.0f s of load and faults; a request fails %.0f s after its scheduled time\n", r.Command, r.Seconds, r.DeadlineS)
	fmt.Fprintf(w, "%-38s %8s %8s %10s %14s %8s %8s\n", "fault", "start s", "heal s", "converge s", "affinity fail", "owners", "tokens")
	for _, f := range r.Faults {
		conv := fmt.Sprintf("%.2f", f.ConvergeS)
		if !f.Converged {
			conv = "never"
		}
		fmt.Fprintf(w, "%-38s %8.1f %8.1f %10s %6d of %5d %8d %8d\n", f.Name, f.StartS, f.HealS, conv, f.AffinityFailed, f.AffinityInWindow, f.DoubleOwners, f.TokenRegressions)
	}
	if rounds := r.byFault(); len(rounds) < len(r.Faults) {
		fmt.Fprintf(w, "by fault, over the rounds:\n%-38s %5s %13s %10s %14s %8s %8s\n", "fault", "runs", "converge p50", "max", "affinity fail", "owners", "tokens")
		for _, a := range rounds {
			fmt.Fprintf(w, "%-38s %5d %13.2f %10.2f %6d of %5d %8d %8d\n", a.Name, a.Runs, a.ConvergeP50S, a.ConvergeMaxS, a.AffinityFailed, a.AffinityInWindow, a.DoubleOwners, a.TokenRegressions)
		}
	}
	for _, f := range r.Faults {
		fmt.Fprintf(w, "  %.1f s %s: %s\n", f.StartS, f.Name, f.What)
		if len(f.Waited) > 0 {
			fmt.Fprintf(w, "      after the heal it waited for: %s\n", strings.Join(f.Waited, "; "))
		}
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "  skipped: %s\n", s)
	}
	fmt.Fprintf(w, "affinity job: %d of %d scheduled requests satisfied; outside the fault windows %d of %d failed: %.3f%% routed to a live owner\n",
		r.AffinitySatisfied, r.AffinityScheduled, r.OutsideFailed, r.OutsideScheduled, r.OutsideRoutedPct)
	for _, u := range r.OutsideFailedFirst {
		fmt.Fprintf(w, "  outside a window: %9.3f s: %s: %s\n", u.At.Seconds(), u.Cause, u.Err)
	}
	fmt.Fprintf(w, "strong job: %d of %d scheduled requests satisfied; history: %d recorded, %d double owners, %d token regressions; %d stale writes refused\n",
		r.StrongSatisfied, r.StrongScheduled, r.Recorded, r.DoubleOwners, r.TokenRegressions, r.StaleWrites)
	for _, e := range r.Examples {
		fmt.Fprintf(w, "  violation: %s\n", e)
	}
	for _, h := range r.Store {
		fmt.Fprintf(w, "store: job %s: %d commits under %d epochs, %d violations\n", h.Job, h.Commits, h.Epochs, len(h.Violations))
	}
	if len(r.Failures) == 0 {
		fmt.Fprintln(w, "every check passed")
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "FAILED: %s\n", f)
	}
}

// faultSummary is one kind of fault over every round it ran in.
type faultSummary struct {
	Name                           string
	Runs                           int
	ConvergeP50S, ConvergeMaxS     float64 // over the runs that converged
	AffinityInWindow               int
	AffinityFailed                 int
	DoubleOwners, TokenRegressions int
}

// byFault sums the faults by kind, in the order they first ran.
func (r *report) byFault() []faultSummary {
	var out []faultSummary
	conv := map[string][]float64{}
	for _, f := range r.Faults {
		i := slices.IndexFunc(out, func(s faultSummary) bool { return s.Name == f.Name })
		if i < 0 {
			i = len(out)
			out = append(out, faultSummary{Name: f.Name})
		}
		s := &out[i]
		s.Runs++
		s.AffinityInWindow += f.AffinityInWindow
		s.AffinityFailed += f.AffinityFailed
		s.DoubleOwners += f.DoubleOwners
		s.TokenRegressions += f.TokenRegressions
		if f.Converged {
			conv[f.Name] = append(conv[f.Name], f.ConvergeS)
		}
	}
	for i := range out {
		cs := conv[out[i].Name]
		if len(cs) == 0 {
			continue
		}
		slices.Sort(cs)
		out[i].ConvergeP50S, out[i].ConvergeMaxS = cs[(len(cs)-1)/2], cs[len(cs)-1]
	}
	return out
}
