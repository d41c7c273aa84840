// Package benchproc runs the child processes of slicerd's benchmark
// harnesses (bench/...): a slicerd binary or example tasks, each logging
// to a file while the harness waits for the line that says it is ready.
package benchproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a child process whose output goes, line by line, to a log file,
// while the harness watches for the line that says it is ready.
type Proc struct {
	name string
	// Cmd is the running command; its Process gives the pid.
	Cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // exit status, valid after done

	ready chan string // the first line containing readyMark

	mu      sync.Mutex
	watches []watch // Await's, each waiting for its line
}

type watch struct {
	mark string
	line chan string
}

// Start starts path with args, logging its output to logPath and
// watching for a line containing readyMark.
func Start(name, logPath, readyMark string, env []string, path string, args ...string) (*Proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{name: name, done: make(chan struct{}), ready: make(chan string, 1)}
	p.Cmd = exec.Command(path, args...)
	p.Cmd.Env = append(os.Environ(), env...)
	SetProcAttr(p.Cmd)
	pr, pw := io.Pipe()
	p.Cmd.Stdout, p.Cmd.Stderr = pw, pw
	if err := p.Cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	var copied sync.WaitGroup
	copied.Add(1)
	go func() {
		defer copied.Done()
		defer logf.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			p.mu.Lock()
			p.watches = slices.DeleteFunc(p.watches, func(w watch) bool {
				if strings.Contains(line, w.mark) {
					w.line <- line
					return true
				}
				return false
			})
			p.mu.Unlock()
			if !seen && strings.Contains(line, readyMark) {
				seen = true
				p.ready <- line
			}
		}
		io.Copy(io.Discard, pr) // a line over 1 MiB ends the scan; keep the pipe drained
	}()
	go func() {
		p.err = p.Cmd.Wait()
		pw.Close()
		copied.Wait()
		close(p.done)
	}()
	return p, nil
}

// WaitReady returns the ready line, or an error when the process exits or
// timeout passes first.
func (p *Proc) WaitReady(timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case line := <-p.ready:
		return line, nil
	case <-p.done:
		return "", fmt.Errorf("%s exited (%v) before it was ready; see its log", p.name, p.err)
	case <-t.C:
		return "", fmt.Errorf("%s was not ready within %v; see its log", p.name, timeout)
	}
}

// Await returns a channel that receives the first line of the process's
// output, written after the call, that contains mark.
func (p *Proc) Await(mark string) <-chan string {
	w := watch{mark: mark, line: make(chan string, 1)}
	p.mu.Lock()
	p.watches = append(p.watches, w)
	p.mu.Unlock()
	return w.line
}

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// ExitCode is the process's exit status once Exited is closed: 0, the
// code it exited with, or -1 when a signal ended it.
func (p *Proc) ExitCode() int {
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		return -1
	}
	return 0
}

// StopAll sends SIGTERM to every process still running, waits up to grace
// for them to exit, then SIGKILLs the rest and waits for them.
func StopAll(procs []*Proc, grace time.Duration) {
	for _, p := range procs {
		_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline.C:
			// Past the grace: kill everything left, then wait for all.
			for _, q := range procs {
				if err := q.Cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
					fmt.Fprintf(os.Stderr, "%s: kill %s: %v\n", filepath.Base(os.Args[0]), q.name, err)
				}
			}
			for _, q := range procs {
				<-q.done
			}
			return
		}
	}
}
