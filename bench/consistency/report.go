package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/slicerd/slicerd/bench/internal/benchproc"
)

type report struct {
	Command   string  `json:"command"`
	Bridge    bool    `json:"bridge"`
	Seconds   float64 `json:"seconds"`
	DeadlineS float64 `json:"deadline_s"`
	SettleS   float64 `json:"settle_s"`
	// The open-loop figures: requests on the timetable, those sent (not
	// refused by the in-flight bound), and those satisfied — answered by
	// the key's owner within the deadline, the client's retries included.
	Scheduled        uint64  `json:"scheduled"`
	Sent             uint64  `json:"sent"`
	Satisfied        uint64  `json:"satisfied"`
	SatisfiedPct     float64 `json:"satisfied_of_scheduled_pct"`
	SentSatisfiedPct float64 `json:"satisfied_of_sent_pct"`
	// Every request a client sent to a task, retries included, and those
	// the task satisfied.
	Attempts          uint64  `json:"attempts"`
	AttemptsSatisfied uint64  `json:"attempts_satisfied"`
	AttemptsPct       float64 `json:"attempts_satisfied_pct"`
	Recorded          int     `json:"recorded"`
	DoubleOwners      int     `json:"double_owners"`
	TokenRegressions  int     `json:"token_regressions"`
	StaleWrites       uint64  `json:"stale_writes_refused"`
	GuardMoves        int     `json:"guard_moves"`
	RecallP50Ms       float64 `json:"recall_p50_ms"`
	RecallP99Ms       float64 `json:"recall_p99_ms"`
	MoveP50Ms         float64 `json:"move_p50_ms"`
	MoveP99Ms         float64 `json:"move_p99_ms"`
	LatencyP50Ms      float64 `json:"latency_p50_ms"`
	LatencyP99Ms      float64 `json:"latency_p99_ms"`
	LatencyP999Ms     float64 `json:"latency_p999_ms"`
	LatencyMaxMs      float64 `json:"latency_max_ms"`
	// Windows are the faults, each with the unsatisfied requests it
	// explains; Outside the unsatisfied requests no fault explains.
	Windows      []windowReport      `json:"windows"`
	OutsideCount int                 `json:"unsatisfied_outside_windows"`
	Outside      []benchproc.Outcome `json:"outside,omitempty"`
	Unsatisfied  []attributed        `json:"unsatisfied,omitempty"`
	Examples     []string            `json:"examples,omitempty"`
}

// window is a fault's span since the start: from the fault to its end
// (a stopped process continued, etcd restarted; the same instant for a
// kill).
type window struct {
	Name       string
	Start, End time.Duration
}

type windowReport struct {
	Name        string         `json:"name"`
	StartS      float64        `json:"start_s"`
	EndS        float64        `json:"end_s"`
	Unsatisfied int            `json:"unsatisfied"`
	ByCause     map[string]int `json:"by_cause,omitempty"`
}

// attributed is an unsatisfied request and the fault window it falls in
// ("" for none).
type attributed struct {
	benchproc.Outcome
	Window string `json:"window,omitempty"`
}

// attribute assigns each unsatisfied request to the first fault window
// its life overlaps: from its scheduled time to its deadline, against the
// fault's span extended by settle (the time a fault is given to heal:
// failure detection, lease expiry, reassignment).
func (r *report) attribute(ws []window, un []benchproc.Outcome, deadline, settle time.Duration) {
	r.Windows = make([]windowReport, len(ws))
	for i, w := range ws {
		r.Windows[i] = windowReport{Name: w.Name, StartS: w.Start.Seconds(), EndS: w.End.Seconds()}
	}
	r.Unsatisfied = make([]attributed, 0, len(un))
	for _, o := range un {
		a := attributed{Outcome: o}
		i := slices.IndexFunc(ws, func(w window) bool { return o.At <= w.End+settle && o.At+deadline >= w.Start })
		if i < 0 {
			r.OutsideCount++
			r.Outside = append(r.Outside, o)
		} else {
			wr := &r.Windows[i]
			a.Window = wr.Name
			wr.Unsatisfied++
			if wr.ByCause == nil {
				wr.ByCause = map[string]int{}
			}
			wr.ByCause[o.Cause]++
		}
		r.Unsatisfied = append(r.Unsatisfied, a)
	}
}

// writeUnsatisfied lists every unsatisfied request, one a line.
func (r *report) writeUnsatisfied(path string) error {
	var b strings.Builder
	for _, u := range r.Unsatisfied {
		w := u.Window
		if w == "" {
			w = "(outside any fault window)"
		}
		fmt.Fprintf(&b, "%9.3f s\t%s\t%s\t%s\n", u.At.Seconds(), w, u.Cause, u.Err)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func (r report) print(w io.Writer) {
	fmt.Fprintf(w, "%s\n", r.Command)
	fmt.Fprintf(w, "bridge %v, %.0f s: %d requests scheduled, %d sent, %d satisfied within %.0f s of their time: %.3f%% of scheduled (%.3f%% of sent)\n",
		r.Bridge, r.Seconds, r.Scheduled, r.Sent, r.Satisfied, r.DeadlineS, r.SatisfiedPct, r.SentSatisfiedPct)
	fmt.Fprintf(w, "attempts (every request sent to a task, retries included): %d of %d satisfied (%.3f%%)\n",
		r.AttemptsSatisfied, r.Attempts, r.AttemptsPct)
	fmt.Fprintf(w, "history: %d satisfied requests recorded, %d double owners, %d token regressions; backing store refused %d stale writes\n",
		r.Recorded, r.DoubleOwners, r.TokenRegressions, r.StaleWrites)
	fmt.Fprintf(w, "guard moved %d times: recall p50 %.0f ms p99 %.0f ms; whole move p50 %.0f ms p99 %.0f ms\n",
		r.GuardMoves, r.RecallP50Ms, r.RecallP99Ms, r.MoveP50Ms, r.MoveP99Ms)
	fmt.Fprintf(w, "satisfied requests took, from their scheduled time, p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms, max %.0f ms\n",
		r.LatencyP50Ms, r.LatencyP99Ms, r.LatencyP999Ms, r.LatencyMaxMs)
	for _, f := range r.Windows {
		fmt.Fprintf(w, "  fault %6.1f–%6.1f s (+%.0f s to settle): %s: %d unsatisfied", f.StartS, f.EndS, r.SettleS, f.Name, f.Unsatisfied)
		causes := make([]string, 0, len(f.ByCause))
		for c := range f.ByCause {
			causes = append(causes, c)
		}
		slices.Sort(causes)
		for i, c := range causes {
			sep := ", "
			if i == 0 {
				sep = " ("
			}
			fmt.Fprintf(w, "%s%d %s", sep, f.ByCause[c], c)
		}
		if len(causes) > 0 {
			fmt.Fprint(w, ")")
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "unsatisfied requests outside any fault window: %d\n", r.OutsideCount)
	for i, o := range r.Outside {
		if i == 20 {
			fmt.Fprintf(w, "  ... and %d more: every unsatisfied request is in unsatisfied.txt in the log directory\n", len(r.Outside)-i)
			break
		}
		fmt.Fprintf(w, "  %9.3f s: %s: %s\n", o.At.Seconds(), o.Cause, o.Err)
	}
	for _, e := range r.Examples {
		fmt.Fprintf(w, "  violation: %s\n", e)
	}
}
