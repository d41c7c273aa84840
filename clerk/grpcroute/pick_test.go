package grpcroute

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/clerk/clerktest"
)

// taskPicker stands for a task's pick_first child: it answers with the
// task's index.
type taskPicker struct {
	i    int
	conn *taskConn
}

type taskConn struct {
	balancer.SubConn
	i int
}

func (p *taskPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{SubConn: p.conn}, nil
}

// pickerFor builds the picker for a job of tasks tasks with perTask
// slices each and replicas tasks per slice, with the tasks in states
// (ready unless listed).
func pickerFor(tasks, perTask, replicas int, states map[int]connectivity.State) (*picker, *clerk.Table) {
	ts := make([]assign.Task, tasks)
	for i := range ts {
		ts[i] = assign.Task{Name: fmt.Sprintf("t%05d", i), Addr: fmt.Sprintf("10.0.%d.%d:80", i/250, i%250)}
	}
	a := clerktest.Uniform("kv", 1, ts, tasks*perTask)
	for i := range a.Slices {
		a.Slices[i].Tasks = a.Slices[i].Tasks[:0]
		for r := range replicas {
			a.Slices[i].Tasks = append(a.Slices[i].Tasks, a.Tasks[(i+r)%tasks].Name)
		}
		sortNames(a.Slices[i].Tasks)
	}
	if err := a.Validate(); err != nil {
		panic(err)
	}
	t := clerk.NewTable(a)
	kids := make([]endpointsharding.ChildState, tasks)
	for i, task := range a.Tasks {
		st, ok := states[i]
		if !ok {
			st = connectivity.Ready
		}
		kids[i] = endpointsharding.ChildState{
			Endpoint: resolver.Endpoint{Addresses: []resolver.Address{{Addr: task.Addr}}},
			State:    balancer.State{ConnectivityState: st, Picker: &taskPicker{i: i, conn: &taskConn{i: i}}},
		}
	}
	return newPicker(t, groupSlices(t), kids, DefaultKeyHeader), t
}

func sortNames(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func pickedTask(t *testing.T, p *picker, ctx context.Context) (int, error) {
	t.Helper()
	res, err := p.Pick(balancer.PickInfo{FullMethodName: "/kv.KV/Get", Ctx: ctx})
	if err != nil {
		return -1, err
	}
	return res.SubConn.(*taskConn).i, nil
}

func TestPickerStates(t *testing.T) {
	// Three tasks, one slice each, no replicas.
	p, tab := pickerFor(3, 1, 1, map[int]connectivity.State{
		1: connectivity.Connecting,
		2: connectivity.TransientFailure,
	})
	keyOf := func(task int) context.Context {
		for i := range 1000 {
			k := fmt.Sprint(i)
			if tab.Lookup(assign.HashString(k)) == task {
				return WithKeyString(context.Background(), k)
			}
		}
		panic("no key")
	}
	if i, err := pickedTask(t, p, keyOf(0)); i != 0 || err != nil {
		t.Errorf("a ready task's key: task %d, %v", i, err)
	}
	if _, err := pickedTask(t, p, keyOf(1)); err != balancer.ErrNoSubConnAvailable {
		t.Errorf("a connecting task's key: %v, want to wait (ErrNoSubConnAvailable)", err)
	}
	if i, err := pickedTask(t, p, keyOf(2)); i != 0 || err != nil {
		t.Errorf("a failed task's key: task %d, %v; want the fallback to the ready task 0", i, err)
	}
	if i, err := pickedTask(t, p, context.Background()); i != 0 || err != nil {
		t.Errorf("no key: task %d, %v; want a ready task", i, err)
	}

	// Nothing ready, nothing connecting: the call fails UNAVAILABLE.
	p, _ = pickerFor(2, 1, 1, map[int]connectivity.State{0: connectivity.TransientFailure, 1: connectivity.TransientFailure})
	if _, err := pickedTask(t, p, context.Background()); err != errNoTask {
		t.Errorf("no task reachable: %v, want %v", err, errNoTask)
	}
}

// BenchmarkPick is the cost the policy adds to a call: key from the
// context or a header, binary search, random replica, the child's pick.
func BenchmarkPick(b *testing.B) {
	for _, c := range []struct{ tasks, perTask, replicas int }{
		{10, 10, 1}, {100, 100, 2}, {10000, 100, 1},
	} {
		p, _ := pickerFor(c.tasks, c.perTask, c.replicas, nil)
		name := fmt.Sprintf("tasks=%d/slices=%d/replicas=%d", c.tasks, c.tasks*c.perTask, c.replicas)
		b.Run(name+"/context", func(b *testing.B) {
			benchPicks(b, p, func(k string) context.Context { return WithKeyString(context.Background(), k) })
		})
		b.Run(name+"/header", func(b *testing.B) {
			benchPicks(b, p, func(k string) context.Context {
				return metadata.AppendToOutgoingContext(context.Background(), DefaultKeyHeader, k)
			})
		})
	}
}

// benchPicks picks over 1,024 keys, each attached to its call's context
// by attach.
func benchPicks(b *testing.B, p *picker, attach func(key string) context.Context) {
	keys := make([]context.Context, 1024)
	for i := range keys {
		keys[i] = attach(fmt.Sprintf("user-%d", i))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := p.Pick(balancer.PickInfo{FullMethodName: "/kv.KV/Get", Ctx: keys[i&1023]}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkNewPicker is the cost of a new picker, paid when a task's
// connection changes state.
func BenchmarkNewPicker(b *testing.B) {
	for _, tasks := range []int{100, 10000} {
		p, t := pickerFor(tasks, 100, 1, nil)
		g := groupSlices(t)
		kids := make([]endpointsharding.ChildState, tasks)
		for i, task := range t.Assignment().Tasks {
			kids[i] = endpointsharding.ChildState{
				Endpoint: resolver.Endpoint{Addresses: []resolver.Address{{Addr: task.Addr}}},
				State:    balancer.State{ConnectivityState: connectivity.Ready, Picker: p.ready[i]},
			}
		}
		b.Run(fmt.Sprintf("tasks=%d/slices=%d", tasks, tasks*100), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				newPicker(t, g, kids, DefaultKeyHeader)
			}
		})
	}
}
