//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process whose output goes, line by line, to a log file,
// while the harness watches for the line that says it is ready.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // exit status, valid after done

	ready chan string // the first line containing readyMark
}

// startProc starts path with args, logging its output to logPath and
// watching for a line containing readyMark.
func startProc(name, logPath, readyMark string, env []string, path string, args ...string) (*proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, done: make(chan struct{}), ready: make(chan string, 1)}
	p.cmd = exec.Command(path, args...)
	p.cmd.Env = append(os.Environ(), env...)
	setProcAttr(p.cmd)
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
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
			if !seen && strings.Contains(line, readyMark) {
				seen = true
				p.ready <- line
			}
		}
		io.Copy(io.Discard, pr) // a line over 1 MiB ends the scan; keep the pipe drained
	}()
	go func() {
		p.err = p.cmd.Wait()
		pw.Close()
		copied.Wait()
		close(p.done)
	}()
	return p, nil
}

// waitReady returns the ready line, or an error when the process exits or
// timeout passes first.
func (p *proc) waitReady(timeout time.Duration) (string, error) {
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

// stopAll sends SIGTERM to every process still running, waits up to grace
// for them to exit, then SIGKILLs the rest and waits for them.
func stopAll(procs []*proc, grace time.Duration) {
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline.C:
			// Past the grace: kill everything left, then wait for all.
			for _, q := range procs {
				if err := q.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
					fmt.Fprintf(os.Stderr, "slowsub: kill %s: %v\n", q.name, err)
				}
			}
			for _, q := range procs {
				<-q.done
			}
			return
		}
	}
}
