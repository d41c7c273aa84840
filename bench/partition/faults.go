package main

import (
	"context"
	"fmt"
	"syscall"

	"github.com/slicerd/slicerd/internal/netbed"
)

// contSignal continues a stopped process.
const contSignal = syscall.SIGCONT

// fault is one kind of fault the nemesis injects: inject starts it,
// choosing its target in the cluster as it is now (the lease holder, the
// etcd leader), and returns what it did and how to heal it. The nemesis
// holds each fault for -hold before healing it.
type fault struct {
	name   string
	inject func(ctx context.Context, c *cluster) (what string, heal func(context.Context) error, err error)
}

// faults are the scenarios, in the order a round runs them.
var faults = []fault{
	{"symmetric partition", func(ctx context.Context, c *cluster) (string, func(context.Context) error, error) {
		a := c.hosts("h3", "h4")
		b := c.bed.Others(a...)
		return fmt.Sprintf("%v | %v, blackhole routes on both sides", a, b), c.bed.Heal, c.bed.Partition(ctx, a, b)
	}},
	{"one-way: a node cannot send", func(ctx context.Context, c *cluster) (string, func(context.Context) error, error) {
		a := c.hosts("h2")
		return "h2 (etcd e2, node n2, tasks s2 a2) sends to no host; it still receives", c.bed.Heal, c.bed.Block(ctx, a, c.bed.Others(a...))
	}},
	{"one-way: a task host receives nothing", func(ctx context.Context, c *cluster) (string, func(context.Context) error, error) {
		a := c.hosts("h4")
		return "no host can send to h4 (tasks s4 a4); h4 still sends", c.bed.Heal, c.bed.Block(ctx, c.bed.Others(a...), a)
	}},
	{"lease holder isolated with a minority", func(ctx context.Context, c *cluster) (string, func(context.Context) error, error) {
		holder, err := c.waitLeaseHolder(ctx, strongJob, c.o.convergeWithin)
		if err != nil {
			return "", nil, err
		}
		minority := []*netbed.Host{holder.host, c.bed.Host("h4")}
		return fmt.Sprintf("%s (on %s, holding job %s's lease) and h4 cut from the other three hosts", holder.name, holder.host, strongJob),
			c.bed.Heal, c.bed.Isolate(ctx, minority...)
	}},
	{"etcd follower isolated", func(ctx context.Context, c *cluster) (string, func(context.Context) error, error) {
		leader, err := c.etcdLeader(ctx)
		if err != nil {
			return "", nil, err
		}
		holder, _ := c.leaseHolder(ctx, strongJob)
		var target *proc
		for _, e := range c.etcd {
			if e != leader && (target == nil || c.nodeOn(target.host) == holder) {
				target = e
			}
		}
		return fmt.Sprintf("follower %s's host %s isolated (leader %s)", target.name, target.host, leader.name),
			c.bed.Heal, c.bed.Isolate(ctx, target.host)
	}},
	{"etcd leader isolated", func(ctx context.Context, c *cluster) (string, func(context.Context) error, error) {
		leader, err := c.etcdLeader(ctx)
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("leader %s's host %s isolated", leader.name, leader.host), c.bed.Heal, c.bed.Isolate(ctx, leader.host)
	}},
	{"switch port down", func(ctx context.Context, c *cluster) (string, func(context.Context) error, error) {
		h := c.bed.Host("h1")
		return "h1's link to the switch down (etcd e1, node n1, tasks s1 a1)", c.bed.Heal, c.bed.LinkDown(ctx, h)
	}},
	{"kill -9 the lease holder", func(ctx context.Context, c *cluster) (string, func(context.Context) error, error) {
		holder, err := c.waitLeaseHolder(ctx, strongJob, c.o.convergeWithin)
		if err != nil {
			return "", nil, err
		}
		if err := kill(holder); err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("SIGKILL %s (holding job %s's lease), restarted at the heal", holder.name, strongJob),
			func(context.Context) error { return holder.start() }, nil
	}},
	{"kill -9 tasks", func(ctx context.Context, c *cluster) (string, func(context.Context) error, error) {
		ps := []*proc{c.proc("s2"), c.proc("a2")}
		for _, p := range ps {
			if err := kill(p); err != nil {
				return "", nil, err
			}
		}
		return "SIGKILL s2 and a2 (on h2), restarted at the heal", func(context.Context) error {
			for _, p := range ps {
				if err := p.start(); err != nil {
					return err
				}
			}
			return nil
		}, nil
	}},
	{"SIGSTOP the lease holder", func(ctx context.Context, c *cluster) (string, func(context.Context) error, error) {
		holder, err := c.waitLeaseHolder(ctx, strongJob, c.o.convergeWithin)
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("SIGSTOP %s (holding job %s's lease), SIGCONT at the heal", holder.name, strongJob),
			func(context.Context) error { return holder.p.Cmd.Process.Signal(contSignal) },
			holder.p.Cmd.Process.Signal(syscall.SIGSTOP)
	}},
	{"SIGSTOP the etcd leader", func(ctx context.Context, c *cluster) (string, func(context.Context) error, error) {
		leader, err := c.etcdLeader(ctx)
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("SIGSTOP etcd leader %s, SIGCONT at the heal", leader.name),
			func(context.Context) error { return leader.p.Cmd.Process.Signal(contSignal) },
			leader.p.Cmd.Process.Signal(syscall.SIGSTOP)
	}},
}

// kill sends SIGKILL to p and waits for it to exit.
func kill(p *proc) error {
	if err := p.p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	<-p.p.Exited()
	return nil
}

// hosts returns the named hosts.
func (c *cluster) hosts(names ...string) []*netbed.Host {
	var hs []*netbed.Host
	for _, n := range names {
		hs = append(hs, c.bed.Host(n))
	}
	return hs
}

// nodeOn returns the name of the slicerd node on h, or "".
func (c *cluster) nodeOn(h *netbed.Host) string {
	for _, n := range c.nodes {
		if n.host == h {
			return n.name
		}
	}
	return ""
}
