package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
)

func printJob(w io.Writer, j *slicerv1.JobInfo) {
	p := j.GetConfig()
	assigner := j.GetPreferredAssigner()
	if assigner == "" {
		assigner = "(not chosen yet)"
	}
	consistency := assign.Affinity
	if p.GetConsistency() == slicerv1.Consistency_CONSISTENCY_STRONG {
		consistency = assign.Strong
	}
	algorithm := p.GetAlgorithm()
	if algorithm == "" {
		algorithm = assign.AlgorithmWeightedMove
	}
	fmt.Fprintf(w, "job %s\n  generation      %d\n  assigner        %s\n  min redundancy  %d\n  max redundancy  %d\n  consistency     %s\n  algorithm       %s\n  frozen          %v\n  configured      %v\n  live tasks      %d\n",
		j.GetName(), j.GetGeneration(), assigner, p.GetMinRedundancy(), p.GetMaxRedundancy(), consistency, algorithm, p.GetFrozen(), j.GetConfigured(), len(j.GetLiveTasks()))
	for _, t := range j.GetLiveTasks() {
		extra := ""
		if c := t.GetCapacity(); c != 0 {
			extra += fmt.Sprintf("  capacity %g", c)
		}
		if m := t.GetMemoryLimit(); m != 0 {
			extra += "  memory limit " + formatBytes(float64(m))
		}
		if t.GetDraining() {
			extra += "  draining"
		} else if t.GetCordoned() {
			extra += "  cordoned"
		}
		fmt.Fprintf(w, "    %-20s %s%s\n", t.GetName(), t.GetAddress(), extra)
	}
	// The effective tuning: stored zeros are the defaults.
	cfg := assign.Config{
		MinSlicesPerTask: int(p.GetMinSlicesPerTask()), MaxSlicesPerTask: int(p.GetMaxSlicesPerTask()),
		MergeChurn: p.GetMergeChurn(), MoveChurn: p.GetMoveChurn(),
		MergeLoadFactor: p.GetMergeLoadFactor(), SplitLoadFactor: p.GetSplitLoadFactor(), SuppressBelow: p.GetSuppressBelow(),
	}.WithDefaults()
	def := assign.DefaultConfig()
	fmt.Fprintf(w, "  tuning\n")
	for _, f := range []struct {
		name       string
		value, std float64
	}{
		{"min slices per task", float64(cfg.MinSlicesPerTask), float64(def.MinSlicesPerTask)},
		{"max slices per task", float64(cfg.MaxSlicesPerTask), float64(def.MaxSlicesPerTask)},
		{"merge churn", cfg.MergeChurn, def.MergeChurn},
		{"move churn", cfg.MoveChurn, def.MoveChurn},
		{"merge load factor", cfg.MergeLoadFactor, def.MergeLoadFactor},
		{"split load factor", cfg.SplitLoadFactor, def.SplitLoadFactor},
		{"suppress below", cfg.SuppressBelow, def.SuppressBelow},
	} {
		note := ""
		if f.value == f.std {
			note = " (default)"
		}
		fmt.Fprintf(w, "    %-20s %g%s\n", f.name, f.value, note)
	}
	if v := p.GetVictim(); v != "" {
		fmt.Fprintf(w, "    %-20s %s\n", "victim", v)
	}
	if d := p.GetHandoffDeadlineMs(); d != 0 {
		fmt.Fprintf(w, "    %-20s %v (make-before-break)\n", "handoff deadline", time.Duration(d)*time.Millisecond)
	}
	if m := p.GetMaxSlices(); m != 0 {
		fmt.Fprintf(w, "    %-20s %d\n", "max slices", m)
	}
	for _, l := range []struct {
		name  string
		tasks []string
	}{{"drained", p.GetDrainedTasks()}, {"cordoned", p.GetCordonedTasks()}} {
		if len(l.tasks) > 0 {
			fmt.Fprintf(w, "  %-15s %s\n", l.name, strings.Join(l.tasks, ", "))
		}
	}
	for i, pin := range p.GetPins() {
		if i == 0 {
			fmt.Fprintf(w, "  pins\n")
		}
		note := ""
		if !slices.ContainsFunc(j.GetLiveTasks(), func(t *slicerv1.Task) bool { return t.GetName() == pin.GetTask() && !t.GetDraining() }) {
			note = "  (inactive: the task is not live, or draining)"
		}
		reason := ""
		if r := pin.GetReason(); r != "" {
			reason = fmt.Sprintf("  %q", r)
		}
		fmt.Fprintf(w, "    [%#x, %#x) -> %s%s%s\n", pin.GetStart(), pin.GetEnd(), pin.GetTask(), reason, note)
	}
	printLoad(w, j)
}

// printLoad writes the Assigner's view of the job's load and balance.
func printLoad(w io.Writer, j *slicerv1.JobInfo) {
	if j.GetReportingTasks() == 0 {
		fmt.Fprintf(w, "  load            no reports\n")
		return
	}
	fmt.Fprintf(w, "  load            %.4g/s reported by %d tasks\n  imbalance       %.3f\n",
		j.GetTotalLoad(), j.GetReportingTasks(), j.GetImbalance())
	mean := j.GetTotalLoad() / float64(max(len(j.GetTaskLoads()), 1))
	for _, tl := range j.GetTaskLoads() {
		rel := 0.0
		if mean > 0 {
			rel = tl.GetLoad() / mean
		}
		state := ""
		if b := tl.GetBytes(); b > 0 {
			state = "  state " + formatBytes(b)
		}
		fmt.Fprintf(w, "    %-20s %10.4g/s  %5.2f x mean%s\n", tl.GetTask(), tl.GetLoad(), rel, state)
	}
}

// formatBytes writes a byte count in binary units: 512 B, 1.5 KiB, 2 GiB.
func formatBytes(b float64) string {
	const units = "KMGTP"
	if b < 1024 {
		return fmt.Sprintf("%.0f B", b)
	}
	i := -1
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	return fmt.Sprintf("%.4g %ciB", b, units[i])
}

// table prints rows under a header in columns as wide as their widest cell,
// two spaces apart; the last column is not padded. Unlike text/tabwriter it
// keeps the columns aligned across lines printed between the rows.
type table struct {
	header []string
	rows   [][]string
	right  []bool // right-aligned columns, such as numbers with units
}

// print writes the table; after writes what follows row i, if not nil.
func (t table) print(w io.Writer, after func(i int)) {
	widths := make([]int, len(t.header))
	for _, r := range append([][]string{t.header}, t.rows...) {
		for i, cell := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	line := func(r []string) {
		var b strings.Builder
		for i, cell := range r {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			switch {
			case i == len(r)-1:
				b.WriteString(cell)
			case i < len(t.right) && t.right[i]:
				b.WriteString(pad + cell + "  ")
			default:
				b.WriteString(cell + pad + "  ")
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(t.header)
	for i, r := range t.rows {
		line(r)
		if after != nil {
			after(i)
		}
	}
}
