package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/slicerd/slicerd/bench/internal/benchproc"
	"github.com/slicerd/slicerd/internal/failpoint"
	"github.com/slicerd/slicerd/lease"
)

// assigner is one slicerd Assigner of the run. Its addresses stay the
// same across restarts, so that the Clerk and the tasks find it again;
// each start logs to a file of its own.
type assigner struct {
	name, bin              string
	args                   []string
	rpc, gossip, failpoint string // failpoint: its control endpoint
	p                      *benchproc.Proc
	logs                   []string
	dir                    string
}

// start starts (or restarts) the Assigner, joining gossip through join.
func (a *assigner) start(join string) error {
	logf := filepath.Join(a.dir, fmt.Sprintf("%s-%d.log", a.name, len(a.logs)))
	args := append([]string{"--rpc-addr", a.rpc, "--gossip-addr", a.gossip}, a.args...)
	if join != "" {
		args = append(args, "--join", join)
	}
	p, _, err := benchproc.StartSlicerdEnv(a.name, logf, a.bin, []string{failpoint.AddrEnv + "=" + a.failpoint}, args, 30*time.Second)
	if err != nil {
		return err
	}
	a.p, a.logs = p, append(a.logs, logf)
	return nil
}

// arm sets the Assigner's failpoint name to action through its control
// endpoint ("off" disarms it).
func (a *assigner) arm(ctx context.Context, name, action string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+a.failpoint+"/"+name, strings.NewReader(action))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("arm %s on %s: %w", name, a.name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("arm %s=%s on %s: %s", name, action, a.name, resp.Status)
	}
	return nil
}

// nemesis injects the faults of a run, each opening a fault window.
type nemesis struct {
	ctx       context.Context
	start     time.Time
	say       func(string, ...any)
	assigners []*assigner
	windows   []window
	fireWait  time.Duration // how long a targeted fault waits for its point
}

func (n *nemesis) begin(name string) int {
	n.say("%s", name)
	n.windows = append(n.windows, window{Name: name, Start: time.Since(n.start)})
	return len(n.windows) - 1
}

func (n *nemesis) end(i int) { n.windows[i].End = time.Since(n.start) }

// other returns the Assigner other than a, to join gossip through.
func (n *nemesis) other(a *assigner) *assigner {
	for _, b := range n.assigners {
		if b != a {
			return b
		}
	}
	return a
}

// target arms point with action on every Assigner — only the job lease's
// holder drives the guard, so only it fires — and returns the Assigner
// whose point fired, with the fired line seen, or nil when none fired
// within fireWait; the other Assigners' points are disarmed.
func (n *nemesis) target(point, action string) (*assigner, error) {
	fired := make(chan *assigner, len(n.assigners))
	stop := make(chan struct{})
	defer close(stop)
	for _, a := range n.assigners {
		seen := a.p.Await("failpoint: " + point + " fired")
		go func() {
			select {
			case <-seen:
				fired <- a
			case <-stop:
			}
		}()
		if err := a.arm(n.ctx, point, action); err != nil {
			return nil, err
		}
	}
	t := time.NewTimer(n.fireWait)
	defer t.Stop()
	var hit *assigner
	select {
	case hit = <-fired:
	case <-t.C:
	case <-n.ctx.Done():
	}
	for _, a := range n.assigners {
		if a != hit {
			// A stopped or crashed one cannot answer; the point it
			// had is gone with it or fired.
			actx, cancel := context.WithTimeout(context.WithoutCancel(n.ctx), time.Second)
			a.arm(actx, point, "off")
			cancel()
		}
	}
	if hit == nil && n.ctx.Err() == nil {
		n.say("failpoint %s did not fire within %v (no guard move); fault skipped", point, n.fireWait)
	}
	return hit, nil
}

// pauseAfterRecall stops the holder (SIGSTOP, from its own failpoint)
// right after it recalled the guard, for hold, then continues it: the
// other Assigner takes the job over from a move stopped after its recall.
func (n *nemesis) pauseAfterRecall(hold time.Duration) error {
	a, err := n.target("guard/after-recall-guard", "1*stop")
	if a == nil {
		return err
	}
	w := n.begin(fmt.Sprintf("%s stopped right after a guard recall (failpoint guard/after-recall-guard=stop) for %v, then SIGCONT", a.name, hold))
	benchproc.Sleep(context.WithoutCancel(n.ctx), hold)
	a.p.Cmd.Process.Signal(syscall.SIGCONT)
	n.end(w)
	return nil
}

// etcdStopDuringWait holds the holder's guard driver just before it waits
// for the guard's readers, stops etcd, lets the wait run against it, and
// restarts etcd after down.
func (n *nemesis) etcdStopDuringWait(etcd *benchproc.Etcd, down time.Duration) error {
	a, err := n.target("guard/before-wait-guard", "1*pause(200ms)")
	if a == nil {
		return err
	}
	// The window opens before the stop, which takes a while.
	w := n.begin(fmt.Sprintf("etcd stopped while %s's guard driver waits for the guard's readers (failpoint guard/before-wait-guard), restarted after %v", a.name, down))
	etcd.Stop()
	benchproc.Sleep(context.WithoutCancel(n.ctx), down)
	err = etcd.Restart()
	n.end(w)
	return err
}

// crashMidBridge crashes the holder right after it opened a bridge,
// before it recalls the guard, and restarts it after down.
func (n *nemesis) crashMidBridge(down time.Duration) error {
	a, err := n.target("guard/after-set-bridge", "1*crash")
	if a == nil {
		return err
	}
	w := n.begin(fmt.Sprintf("%s crashed mid-bridge (failpoint guard/after-set-bridge=crash), restarted after %v", a.name, down))
	<-a.p.Exited()
	if code := a.p.ExitCode(); code != failpoint.CrashExit {
		return fmt.Errorf("%s exited with %d, want the failpoint's %d", a.name, code, failpoint.CrashExit)
	}
	benchproc.Sleep(context.WithoutCancel(n.ctx), down)
	err = a.start(n.other(a).gossip)
	n.end(w)
	return err
}

// run injects the faults at fixed fractions of the run, each after a
// quiet stretch so that its effect can be told apart: first the blunt
// ones (a task stopped, a task killed, the lease holder killed, etcd
// stopped), then, with -targeted, the ones aimed by failpoints at a guard
// move's steps.
func (n *nemesis) run(o options, tasks map[string][]*benchproc.Proc, etcd *benchproc.Etcd) error {
	signal := func(name string, s syscall.Signal) {
		for _, p := range tasks[name] {
			p.Cmd.Process.Signal(s)
		}
	}
	at := func(frac float64) bool {
		return benchproc.SleepUntil(n.ctx, n.start.Add(time.Duration(frac*float64(o.duration)))) == nil
	}
	steps := []func() error{
		func() error {
			w := n.begin("SIGSTOP kv-1 for " + (2 * o.leaseTTL).String() + ", then SIGCONT")
			signal("kv-1", syscall.SIGSTOP)
			benchproc.Sleep(context.WithoutCancel(n.ctx), 2*o.leaseTTL)
			signal("kv-1", syscall.SIGCONT)
			n.end(w)
			return nil
		},
		func() error {
			w := n.begin("SIGKILL kv-2")
			signal("kv-2", syscall.SIGKILL)
			n.end(w)
			return nil
		},
		func() error {
			var logs []string
			for _, a := range n.assigners {
				logs = append(logs, a.logs...)
			}
			holder := leaseHolder(logs...)
			for _, a := range n.assigners {
				if slices.Contains(a.logs, holder) {
					w := n.begin(fmt.Sprintf("SIGKILL %s, the job lease's holder, restarted after %v", a.name, o.restart))
					a.p.Cmd.Process.Signal(syscall.SIGKILL)
					<-a.p.Exited()
					benchproc.Sleep(context.WithoutCancel(n.ctx), o.restart)
					err := a.start(n.other(a).gossip)
					n.end(w)
					return err
				}
			}
			return nil
		},
		func() error {
			w := n.begin("etcd stopped for 1s, then restarted")
			etcd.Stop() // takes a while: the window is open already
			benchproc.Sleep(context.WithoutCancel(n.ctx), time.Second)
			err := etcd.Restart()
			n.end(w)
			return err
		},
	}
	if o.targeted {
		steps = append(steps,
			// Last: after it the job may stay without a lease holder
			// for a while (see docs/benchmarks.md).
			func() error { return n.crashMidBridge(o.restart) },
			func() error { return n.etcdStopDuringWait(etcd, time.Second) },
			func() error { return n.pauseAfterRecall(2 * lease.DefaultJobTTL) },
		)
	}
	for i, step := range steps {
		if !at(float64(i+1) / float64(len(steps)+1)) {
			return nil
		}
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}
