package cli

import (
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/urfave/cli/v2"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
)

func init() {
	servedBy["history"] = gossip.RoleAssigner
	servedBy["why"] = gossip.RoleAssigner
}

// historyCommands are job history and job why.
func historyCommands() []*cli.Command {
	return []*cli.Command{
		{
			Name:      "history",
			Usage:     "show a job's recorded decisions, newest first: why each was taken, what it moved, churn and imbalance",
			ArgsUsage: "JOB",
			Description: "Every assignment an Assigner commits is recorded with it, in the same store write: the cause\n" +
				"(initial, task-failed, task-left, task-joined, task-moved, operator, load, takeover or\n" +
				"make-before-break), the moves of each phase of the algorithm, the key churn and the\n" +
				"imbalance (max/mean task utilisation) before and after. The store keeps the newest 256\n" +
				"decisions of each job. Reading it needs what 'job get' needs.",
			Flags: append(clientFlags(), addrFlag("history"),
				&cli.UintFlag{Name: "limit", Value: 20, Usage: "most decisions to show (0: all that are kept)"},
				&cli.BoolFlag{Name: "moves", Usage: "list each decision's moves with their reasons"}),
			OnUsageError: subcommandUsageError,
			Action:       jobHistory,
		},
		{
			Name:      "why",
			Usage:     "explain why a key is on its tasks: its slice, the tasks serving it, and the decisions that moved it",
			ArgsUsage: "JOB KEY",
			Description: "KEY is an application key, as clients pass it to the Clerk: its slice key is XXH64(KEY) >> 1.\n" +
				"With --hex, KEY is the key's bytes in hex; with --slice-key, KEY is a slice key (decimal or\n" +
				"0x hex, below 2^63) as 'job get' and 'job history' print them. The decisions listed are those\n" +
				"in the job's history that moved the key, newest first, with the moves that did. A KEY that\n" +
				"starts with '-' goes after '--': slicerd job why kv -- -key.",
			Flags: append(clientFlags(), addrFlag("why"),
				&cli.BoolFlag{Name: "hex", Usage: "KEY is hex-encoded bytes"},
				&cli.BoolFlag{Name: "slice-key", Usage: "KEY is a slice key, not an application key"}),
			OnUsageError: subcommandUsageError,
			Action:       jobWhy,
		},
	}
}

func jobHistory(c *cli.Context) error {
	job, err := jobArg(c)
	if err != nil {
		return err
	}
	limit := c.Uint("limit")
	if limit > 256 {
		return usageError("invalid --limit %d: the store keeps at most 256 decisions of a job", limit)
	}
	client, err := jobClient(c)
	if err != nil {
		return err
	}
	ctx, cancel := rpcContext(c)
	defer cancel()
	resp, err := client.GetJobHistory(ctx, connect.NewRequest(&slicerv1.GetJobHistoryRequest{Job: job, Limit: uint32(limit)}))
	if err != nil {
		return rpcError(c, err)
	}
	printHistory(c.App.Writer, job, resp.Msg.GetDecisions(), c.Bool("moves"))
	return nil
}

// printHistory prints decisions as a table, newest first. With moves each
// decision's row is followed by its moves, and the columns stay aligned
// across them.
func printHistory(w io.Writer, job string, ds []*slicerv1.Decision, moves bool) {
	if len(ds) == 0 {
		fmt.Fprintf(w, "job %s: no decision recorded\n", job)
		return
	}
	t := table{header: []string{"GENERATION", "TIME", "CAUSE", "CHURN", "IMBALANCE", "MOVES", "DETAIL"}, right: []bool{3: true, 5: true}}
	for _, d := range ds {
		t.rows = append(t.rows, []string{strconv.FormatUint(d.GetGeneration(), 10), decisionTime(d), d.GetCause(),
			fmt.Sprintf("%.2f%%", 100*d.GetChurn()), imbalanceChange(d),
			strconv.Itoa(len(d.GetMoves()) + int(d.GetMovesOmitted())), d.GetDetail()})
	}
	t.print(w, func(i int) {
		if !moves {
			return
		}
		d := ds[i]
		if ph := phaseSummary(d); ph != "" {
			fmt.Fprintf(w, "    phases: %s\n", ph)
		}
		printMoves(w, d.GetMoves(), "    ")
		if n := d.GetMovesOmitted(); n > 0 {
			fmt.Fprintf(w, "    ... %d more moves not recorded\n", n)
		}
	})
}

// phaseSummary renders a decision's move counts by phase, such as
// "by membership: departed 3, merge 2".
func phaseSummary(d *slicerv1.Decision) string {
	var parts []string
	for _, p := range d.GetPhases() {
		name := p.GetPhase()
		if name == "" {
			name = "-"
		}
		parts = append(parts, fmt.Sprintf("%s %d", name, p.GetMoves()))
	}
	s := strings.Join(parts, ", ")
	if a := d.GetAlgorithm(); a != "" && s != "" {
		s = "by " + a + ": " + s
	}
	return s
}

func printMoves(w io.Writer, ms []*slicerv1.DecisionMove, indent string) {
	for _, m := range ms {
		var who string
		switch {
		case m.GetFrom() != "" && m.GetTo() != "":
			who = m.GetFrom() + " -> " + m.GetTo()
		case m.GetTo() != "":
			who = "+" + m.GetTo()
		default:
			who = "-" + m.GetFrom()
		}
		phase := m.GetPhase()
		if phase == "" {
			phase = "-"
		}
		fmt.Fprintf(w, "%s%-10s  %-14s  [%#x, %#x)  %s: %s\n", indent, phase, m.GetKind(), m.GetStart(), m.GetEnd(), who, m.GetReason())
	}
}

func decisionTime(d *slicerv1.Decision) string {
	return time.Unix(0, d.GetTimeUnixNano()).UTC().Format("2006-01-02T15:04:05.000Z")
}

func jobWhy(c *cli.Context) error {
	if c.NArg() != 2 {
		return usageError("job why needs two arguments, JOB and KEY")
	}
	job, key := c.Args().Get(0), c.Args().Get(1)
	req := &slicerv1.ExplainKeyRequest{Job: job}
	shown := strconv.Quote(key)
	switch {
	case c.Bool("hex") && c.Bool("slice-key"):
		return usageError("--hex and --slice-key do not go together: KEY is either hex bytes or a slice key")
	case c.Bool("hex"):
		b, err := hex.DecodeString(key)
		if err != nil {
			return usageError("invalid KEY %q for --hex: %v; give the key's bytes as hex digits, e.g. 6b6579", key, err)
		}
		req.Which = &slicerv1.ExplainKeyRequest_Key{Key: b}
		shown = "0x" + key
	case c.Bool("slice-key"):
		k, err := strconv.ParseUint(key, 0, 64)
		if err != nil || k >= uint64(assign.KeySpaceEnd) {
			return usageError("invalid slice key %q: give a number below 2^63 (%#x), decimal or 0x hex", key, uint64(assign.KeySpaceEnd))
		}
		req.Which = &slicerv1.ExplainKeyRequest_SliceKey{SliceKey: k}
		shown = ""
	default:
		req.Which = &slicerv1.ExplainKeyRequest_Key{Key: []byte(key)}
	}
	client, err := jobClient(c)
	if err != nil {
		return err
	}
	ctx, cancel := rpcContext(c)
	defer cancel()
	resp, err := client.ExplainKey(ctx, connect.NewRequest(req))
	if err != nil {
		return rpcError(c, err)
	}
	printWhy(c.App.Writer, job, shown, resp.Msg)
	return nil
}

func printWhy(w io.Writer, job, shown string, r *slicerv1.ExplainKeyResponse) {
	if shown == "" {
		fmt.Fprintf(w, "slice key %#x of job %s\n", r.GetSliceKey(), job)
	} else {
		fmt.Fprintf(w, "key %s of job %s: slice key %#x\n", shown, job, r.GetSliceKey())
	}
	s := r.GetSlice()
	if s == nil {
		fmt.Fprintf(w, "the job has no assignment yet\n")
		return
	}
	var tasks []string
	for _, t := range r.GetTasks() {
		tasks = append(tasks, fmt.Sprintf("%s (%s)", t.GetName(), t.GetAddress()))
	}
	fmt.Fprintf(w, "in slice [%#x, %#x) of generation %d, served by %s\n", s.GetStart(), s.GetEnd(), r.GetGeneration(), strings.Join(tasks, ", "))
	ds := r.GetDecisions()
	if len(ds) == 0 {
		if old := r.GetOldestRecordedGeneration(); old != 0 {
			fmt.Fprintf(w, "no recorded decision moved it: it has been there since before generation %d, the oldest recorded\n", old)
		} else {
			fmt.Fprintf(w, "no decision is recorded for the job\n")
		}
		return
	}
	fmt.Fprintf(w, "decisions that moved it, newest first:\n")
	for _, d := range ds {
		fmt.Fprintf(w, "  generation %d at %s, %s: %s\n", d.GetGeneration(), decisionTime(d), d.GetCause(), d.GetDetail())
		printMoves(w, d.GetMoves(), "    ")
	}
}

// imbalanceChange prints a decision's imbalance before and after; both 0
// means the deciding Assigner did not have every task's load (the detail
// says so), and prints as unknown.
func imbalanceChange(d *slicerv1.Decision) string {
	if d.GetImbalanceBefore() == 0 && d.GetImbalanceAfter() == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.3f -> %.3f", d.GetImbalanceBefore(), d.GetImbalanceAfter())
}
