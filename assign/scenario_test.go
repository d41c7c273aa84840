package assign

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the expected output in testdata/*.txt")

// TestScenarios replays the scripts in testdata/*.txt. A script is a list
// of commands; the lines indented by two spaces after each command are the
// expected result, which -update regenerates:
//
//	# comment
//	job demo                  job name for the commands that follow
//	config 2 3                min and max redundancy
//	initial a@host:1 b@host:2 Initial with these tasks
//	live a@host:1 c@host:3    Rebalance the last result onto these tasks
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("found %d scenarios in testdata, want at least 4", len(files))
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got, err := runScenario(t, string(raw))
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != string(raw) {
				t.Errorf("%s: output differs from the file (rerun with -update to accept)\n--- got ---\n%s", file, got)
			}
		})
	}
}

// runScenario executes the commands of a script and returns the script
// with freshly generated expected output.
func runScenario(t *testing.T, script string) (string, error) {
	var out strings.Builder
	job, cfg := "demo", DefaultConfig()
	var cur *Assignment
	sc := bufio.NewScanner(strings.NewReader(script))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "  ") {
			continue // previous expected output
		}
		out.WriteString(line + "\n")
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch cmd, args := fields[0], fields[1:]; cmd {
		case "job":
			if len(args) != 1 {
				return "", fmt.Errorf("line %d: job takes one name", n)
			}
			job = args[0]
		case "config":
			if len(args) != 2 {
				return "", fmt.Errorf("line %d: config takes min and max redundancy", n)
			}
			lo, err1 := strconv.Atoi(args[0])
			hi, err2 := strconv.Atoi(args[1])
			if err1 != nil || err2 != nil {
				return "", fmt.Errorf("line %d: config %v: want two integers", n, args)
			}
			cfg = Config{MinRedundancy: lo, MaxRedundancy: hi}
		case "initial", "live":
			tasks, err := parseTasks(args)
			if err != nil {
				return "", fmt.Errorf("line %d: %w", n, err)
			}
			var next *Assignment
			var d Decision
			if cmd == "initial" {
				next, err = Initial(job, tasks, cfg)
				d = Decision{Changed: true, Churn: 1}
			} else {
				if cur == nil {
					return "", fmt.Errorf("line %d: live before initial", n)
				}
				next, d, err = Rebalance(cur, tasks, cfg)
			}
			if err != nil {
				return "", fmt.Errorf("line %d: %w", n, err)
			}
			checkAssignment(t, next, tasks, cfg)
			writeResult(&out, next, d)
			cur = next
		default:
			return "", fmt.Errorf("line %d: unknown command %q", n, cmd)
		}
	}
	return out.String(), sc.Err()
}

func parseTasks(args []string) ([]Task, error) {
	tasks := make([]Task, len(args))
	for i, a := range args {
		name, addr, ok := strings.Cut(a, "@")
		if !ok {
			return nil, fmt.Errorf("task %q: want name@addr", a)
		}
		tasks[i] = Task{Name: name, Addr: addr}
	}
	return tasks, nil
}

func writeResult(out *strings.Builder, a *Assignment, d Decision) {
	fmt.Fprintf(out, "  generation %d changed=%v churn=%.6f\n", a.Generation, d.Changed, d.Churn)
	for _, m := range d.Moves {
		fmt.Fprintf(out, "  move %s\n", m)
	}
	for _, t := range a.Tasks {
		fmt.Fprintf(out, "  task %s@%s width=%.4f%%\n", t.Name, t.Addr, percent(widths(a)[t.Name]))
	}
	for _, s := range a.Slices {
		fmt.Fprintf(out, "  slice [%#016x, %#016x) %8.4f%% %s\n", s.Start, s.End, percent(s.Width()), strings.Join(s.Tasks, " "))
	}
}

func percent(w SliceKey) float64 { return 100 * float64(w) / float64(KeySpaceEnd) }
