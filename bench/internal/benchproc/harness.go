package benchproc

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
)

// Flags is a repeatable string flag, such as -slicerd-flag.
type Flags []string

func (f *Flags) String() string     { return strings.Join(*f, " ") }
func (f *Flags) Set(v string) error { *f = append(*f, v); return nil }

// LogDir returns the directory a harness keeps its processes' logs in:
// dir, created if needed, or, when dir is "", a new temporary directory
// named after the harness that cleanup removes.
func LogDir(harness, dir string) (path string, cleanup func(), err error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", nil, fmt.Errorf("log dir: %w", err)
		}
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "slicerd-"+harness)
	if err != nil {
		return "", nil, err
	}
	return tmp, func() { os.RemoveAll(tmp) }, nil
}

// Seed stores, in a bbolt data directory, generation 1 of job: n slices
// of equal width dealt to tasks in turn, under a configuration that keeps
// them (no merges, no redundancy).
func Seed(ctx context.Context, dir, job string, tasks []assign.Task, n int) error {
	store, err := storage.OpenDataDir(dir, storage.BoltOptions{})
	if err != nil {
		return err
	}
	defer store.Close()
	cfg := assign.DefaultConfig()
	cfg.MinRedundancy, cfg.MaxRedundancy = 1, 1
	cfg.MaxSlicesPerTask = assign.MaxSlicesPerTaskLimit
	cfg.MinSlicesPerTask = cfg.MaxSlicesPerTask // no merges
	if err := store.SetConfig(ctx, job, cfg); err != nil {
		return err
	}
	a := &assign.Assignment{Job: job, Generation: 1, Tasks: tasks, Slices: make([]assign.Slice, n)}
	width := assign.KeySpaceEnd / assign.SliceKey(n)
	for i := range n {
		a.Slices[i] = assign.Slice{Start: assign.SliceKey(i) * width, End: assign.SliceKey(i+1) * width, Tasks: []string{tasks[i%len(tasks)].Name}}
	}
	a.Slices[n-1].End = assign.KeySpaceEnd
	if err := a.Validate(); err != nil {
		return err
	}
	return store.Commit(ctx, job, 0, a)
}

// Addrs are the addresses a slicerd process serves on, as its JSON
// "slicerd started" log line gives them.
type Addrs struct {
	RPC    string `json:"rpc_addr"`
	Gossip string `json:"gossip_addr"`
}

// StartedAddrs reads slicerd's addresses from its "slicerd started" line
// (SLICERD_LOG_FORMAT=json).
func StartedAddrs(line string) (Addrs, error) {
	var a Addrs
	if err := json.Unmarshal([]byte(line), &a); err != nil || a.RPC == "" || a.Gossip == "" {
		return Addrs{}, fmt.Errorf("cannot read slicerd's addresses from %q: %v", line, err)
	}
	return a, nil
}

// StartSlicerd starts the slicerd binary at path as name, logging JSON to
// logPath, and waits up to ready for it to serve. On failure it stops the
// process and says where its log is.
func StartSlicerd(name, logPath, path string, args []string, ready time.Duration) (*Proc, Addrs, error) {
	return StartSlicerdEnv(name, logPath, path, nil, args, ready)
}

// StartSlicerdEnv is StartSlicerd with env added to the process's
// environment.
func StartSlicerdEnv(name, logPath, path string, env, args []string, ready time.Duration) (*Proc, Addrs, error) {
	p, err := Start(name, logPath, `"msg":"slicerd started"`, append([]string{"SLICERD_LOG_FORMAT=json"}, env...), path, args...)
	if err != nil {
		return nil, Addrs{}, err
	}
	line, err := p.WaitReady(ready)
	if err == nil {
		var a Addrs
		if a, err = StartedAddrs(line); err == nil {
			return p, a, nil
		}
	}
	StopAll([]*Proc{p}, 10*time.Second)
	return nil, Addrs{}, fmt.Errorf("%s: %w (log: %s)", name, err, logPath)
}

// Main runs a harness as a command and returns its exit code: parse the
// flags (exit 2 on an error, 0 for -h), run the experiment until it ends
// or SIGINT or SIGTERM arrives (exit 130, its processes stopped), and
// write the report as indented JSON (asJSON) or with print. An experiment
// error is exit 1.
func Main[O, R any](name string, args []string, stdout, stderr io.Writer,
	parse func([]string, io.Writer) (O, error),
	experiment func(context.Context, O, io.Writer) (R, error),
	asJSON func(O) bool, print func(R, io.Writer)) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := experiment(ctx, o, stderr)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "%s: interrupted; processes stopped\n", name)
			return 130
		}
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	if asJSON(o) {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		print(rep, stdout)
	}
	return 0
}
