package benchproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/slicerd/slicerd/clerk"
)

// Binary is a program a harness runs: the package to build it from
// (relative to the module root) when Path is empty.
type Binary struct {
	Path *string // set by Build when empty
	Name string  // file name in the build directory
	Pkg  string  // e.g. "." for slicerd, "./examples/kvcache/cmd/kvserver"
	Tags string  // build tags, e.g. "failpoints"
}

// Build compiles, into dir, every binary whose Path is empty, from the
// module the harness runs in, and sets its Path. A harness given the paths
// of prebuilt binaries builds nothing.
func Build(ctx context.Context, dir string, bins ...Binary) error {
	var root string
	for _, b := range bins {
		if *b.Path != "" {
			continue
		}
		if root == "" {
			var err error
			if root, err = ModuleRoot(ctx); err != nil {
				return fmt.Errorf("%w, or give the %s binary's path", err, b.Name)
			}
		}
		out := filepath.Join(dir, b.Name)
		args := []string{"build", "-o", out}
		if b.Tags != "" {
			args = append(args, "-tags", b.Tags)
		}
		cmd := exec.CommandContext(ctx, "go", append(args, b.Pkg)...)
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w: %s", b.Pkg, err, msg)
		}
		*b.Path = out
	}
	return nil
}

// ModuleRoot is the directory of the slicerd module the harness runs in.
func ModuleRoot(ctx context.Context) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if err != nil || root == "." || strings.TrimSpace(string(gomod)) == os.DevNull {
		return "", fmt.Errorf("cannot find the slicerd module (go env GOMOD: %v); run from the repository", err)
	}
	return root, nil
}

// WaitTasks waits until the Clerk's assignment names n tasks.
func WaitTasks(ctx context.Context, ck *clerk.Clerk, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if a := ck.Assignment(); a != nil && len(a.Tasks) == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no assignment over all %d tasks within %v (generation %d); see the logs", n, timeout, ck.Generation())
		}
		if err := Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// Sleep waits d, or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// SleepUntil waits until t, or until ctx ends.
func SleepUntil(ctx context.Context, t time.Time) error { return Sleep(ctx, time.Until(t)) }

// Command runs a short slicerd command (e.g. "job", "set", ...) to
// completion, within 30 s, and returns its output in the error when it
// fails.
func Command(ctx context.Context, slicerd string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, slicerd, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("slicerd %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// RunClerk starts a Clerk of job streaming from addr and waits until its
// assignment names n tasks; stop ends it.
func RunClerk(ctx context.Context, job, addr string, n int) (ck *clerk.Clerk, stop func(), err error) {
	ck, err = clerk.New(clerk.Config{Job: job, Addrs: []string{addr}})
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ck.Run(cctx) }()
	stop = func() { cancel(); <-done }
	if err := WaitTasks(ctx, ck, n, 60*time.Second); err != nil {
		stop()
		return nil, nil, err
	}
	return ck, stop, nil
}
