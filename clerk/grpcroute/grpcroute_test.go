package grpcroute_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/clerk/grpcroute"
	"github.com/slicerd/slicerd/internal/testwait"
)

// whoMethod is the one method the test tasks serve: it answers with the
// task's name in the "task" header.
const whoMethod = "/slicerd.test.Who/Who"

// task is a real gRPC server on loopback standing for a task.
type task struct {
	name string
	addr string
	srv  *grpc.Server
	done chan struct{}
}

func startTask(t *testing.T, name, addr string) *task {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tk := &task{name: name, addr: ln.Addr().String(), done: make(chan struct{})}
	tk.srv = grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		var in emptypb.Empty
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		if err := stream.SetHeader(metadata.Pairs("task", name)); err != nil {
			return err
		}
		return stream.SendMsg(&emptypb.Empty{})
	}))
	go func() {
		defer close(tk.done)
		_ = tk.srv.Serve(ln)
	}()
	t.Cleanup(tk.stop)
	return tk
}

func (tk *task) stop() {
	tk.srv.Stop()
	<-tk.done
}

// who calls whoMethod with ctx and returns the name of the task that
// answered.
func who(ctx context.Context, conn *grpc.ClientConn) (string, error) {
	var md metadata.MD
	if err := conn.Invoke(ctx, whoMethod, &emptypb.Empty{}, &emptypb.Empty{}, grpc.Header(&md)); err != nil {
		return "", err
	}
	if v := md.Get("task"); len(v) == 1 {
		return v[0], nil
	}
	return "", fmt.Errorf("no task header in %v", md)
}

type fixture struct {
	t     *testing.T
	dist  *clerktest.Server
	tasks []*task
	conn  *grpc.ClientConn
	// installed receives every generation the channel's Clerk installs.
	installed chan uint64
}

func newFixture(t *testing.T, n int, cfg grpcroute.Config) *fixture {
	t.Helper()
	dist, err := clerktest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dist.Close)
	f := &fixture{t: t, dist: dist, installed: make(chan uint64, 100)}
	for i := range n {
		f.tasks = append(f.tasks, startTask(t, fmt.Sprintf("t%d", i), "127.0.0.1:0"))
	}
	if cfg.Clerk.Addrs == nil {
		cfg.Clerk = clerk.DefaultConfig()
		cfg.Clerk.Addrs = []string{dist.Addr()}
		cfg.Clerk.MaxBackoff = 200 * time.Millisecond
	}
	cfg.Clerk.OnAssignment = func(_, next *assign.Assignment) {
		select {
		case f.installed <- next.Generation:
		default:
		}
	}
	b, err := grpcroute.NewBuilder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.conn, err = grpc.NewClient("slicer:///kv", grpc.WithResolvers(b), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.conn.Close() })
	f.conn.Connect() // start the resolver, and so the Clerk, now
	return f
}

func (f *fixture) assignTasks() []assign.Task {
	var ts []assign.Task
	for _, tk := range f.tasks {
		ts = append(ts, assign.Task{Name: tk.name, Addr: tk.addr})
	}
	return ts
}

// publish sends a and waits until the channel's Clerk installed it.
func (f *fixture) publish(a *assign.Assignment) {
	f.t.Helper()
	f.dist.Publish(a)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case g := <-f.installed:
			if g == a.Generation {
				return
			}
		case <-deadline:
			f.t.Fatalf("generation %d was not installed", a.Generation)
		}
	}
}

func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("key-%d", i)
	}
	return ks
}

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkRouted calls once per key with the key attached by attach, and
// fails unless each answer came from one of the key's tasks in a.
func checkRouted(t *testing.T, conn *grpc.ClientConn, a *assign.Assignment, attach func(context.Context, string) context.Context) {
	t.Helper()
	tab := clerk.NewTable(a)
	ctx := ctxTimeout(t)
	for _, k := range keys(300) {
		got, err := who(attach(ctx, k), conn)
		if err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
		owners := tab.Names(tab.Lookup(assign.HashString(k)))
		if !contains(owners, got) {
			t.Fatalf("key %q went to %s; the assignment gives it to %v", k, got, owners)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func TestRoutesEveryKeyToItsTask(t *testing.T) {
	f := newFixture(t, 3, grpcroute.Config{})
	a := clerktest.Uniform("kv", 1, f.assignTasks(), 12)
	f.publish(a)
	t.Run("context", func(t *testing.T) {
		checkRouted(t, f.conn, a, grpcroute.WithKeyString)
	})
	t.Run("header", func(t *testing.T) {
		checkRouted(t, f.conn, a, func(ctx context.Context, k string) context.Context {
			return metadata.AppendToOutgoingContext(ctx, grpcroute.DefaultKeyHeader, k)
		})
	})
	t.Run("bytes", func(t *testing.T) {
		checkRouted(t, f.conn, a, func(ctx context.Context, k string) context.Context {
			return grpcroute.WithKey(ctx, []byte(k))
		})
	})

	// A new generation moves slices; calls follow it.
	b := clerktest.Uniform("kv", 2, []assign.Task{f.assignTasks()[2], f.assignTasks()[0], f.assignTasks()[1]}, 7)
	f.publish(b)
	checkRouted(t, f.conn, b, grpcroute.WithKeyString)
}

func TestKeyHeaderConfigured(t *testing.T) {
	f := newFixture(t, 3, grpcroute.Config{KeyHeader: "X-User-Bin"})
	a := clerktest.Uniform("kv", 1, f.assignTasks(), 9)
	f.publish(a)
	checkRouted(t, f.conn, a, func(ctx context.Context, k string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "x-user-bin", k)
	})
}

func TestSpreadsOverReplicas(t *testing.T) {
	f := newFixture(t, 3, grpcroute.Config{})
	a := clerktest.Uniform("kv", 1, f.assignTasks(), 3)
	for i := range a.Slices {
		a.Slices[i].Tasks = []string{"t0", "t1"}
	}
	f.publish(a)
	seen := map[string]int{}
	ctx := grpcroute.WithKeyString(ctxTimeout(t), "k")
	for range 200 {
		got, err := who(ctx, f.conn)
		if err != nil {
			t.Fatal(err)
		}
		seen[got]++
	}
	if seen["t0"] == 0 || seen["t1"] == 0 || seen["t2"] != 0 {
		t.Fatalf("calls per task %v: want both replicas t0 and t1 and never t2", seen)
	}
}

// TestFallsBackWhenTasksFail stops a task: its keys go to the live tasks
// until the assignment without it arrives, the others' keys stay put, and
// no call fails.
func TestFallsBackWhenTasksFail(t *testing.T) {
	f := newFixture(t, 3, grpcroute.Config{})
	a := clerktest.Uniform("kv", 1, f.assignTasks(), 12)
	f.publish(a)
	checkRouted(t, f.conn, a, grpcroute.WithKeyString)

	f.tasks[1].stop()
	tab := clerk.NewTable(a)
	ctx := ctxTimeout(t)
	// Calls made right after the stop may still race the connection's
	// failure; once it is seen, every key is served by a live task.
	testwait.For(t, "a call for a key of the stopped task to be answered", func() bool {
		_, err := who(grpcroute.WithKeyString(ctx, ownedBy(tab, "t1")), f.conn)
		return err == nil
	})
	for _, k := range keys(300) {
		got, err := who(grpcroute.WithKeyString(ctx, k), f.conn)
		if err != nil {
			t.Fatalf("key %q with task t1 stopped: %v", k, err)
		}
		owners := tab.Names(tab.Lookup(assign.HashString(k)))
		if got == "t1" || (!contains(owners, "t1") && !contains(owners, got)) {
			t.Fatalf("key %q (tasks %v) went to %s", k, owners, got)
		}
	}
}

// ownedBy returns a key the table gives to task.
func ownedBy(tab *clerk.Table, task string) string {
	for _, k := range keys(1000) {
		if contains(tab.Names(tab.Lookup(assign.HashString(k))), task) {
			return k
		}
	}
	panic("no key of " + task)
}

// TestKeepsRoutingWhileSlicerdIsDown: the held assignment routes while no
// Distributor answers, and the next one is taken when one is back.
func TestKeepsRoutingWhileSlicerdIsDown(t *testing.T) {
	f := newFixture(t, 3, grpcroute.Config{})
	a := clerktest.Uniform("kv", 1, f.assignTasks(), 12)
	f.publish(a)
	addr := f.dist.Addr()
	f.dist.Close()
	checkRouted(t, f.conn, a, grpcroute.WithKeyString)

	dist, err := clerktest.NewServerAt(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dist.Close)
	f.dist = dist
	b := clerktest.Uniform("kv", 2, f.assignTasks()[1:], 5)
	f.publish(b)
	checkRouted(t, f.conn, b, grpcroute.WithKeyString)
}

// TestWaitsForTheFirstAssignment: a call made before any assignment waits
// for it (up to its deadline), then is routed.
func TestWaitsForTheFirstAssignment(t *testing.T) {
	f := newFixture(t, 2, grpcroute.Config{})
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := who(grpcroute.WithKeyString(short, "k"), f.conn); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call before any assignment: %v, want DeadlineExceeded", err)
	}
	a := clerktest.Uniform("kv", 1, f.assignTasks(), 4)
	var wg sync.WaitGroup
	var got string
	var err error
	wg.Add(1)
	go func() {
		defer wg.Done()
		got, err = who(grpcroute.WithKeyString(ctxTimeout(t), "k"), f.conn)
	}()
	f.publish(a)
	wg.Wait()
	tab := clerk.NewTable(a)
	if err != nil || !contains(tab.Names(tab.Lookup(assign.HashString("k"))), got) {
		t.Fatalf("call waiting for the first assignment: %q, %v", got, err)
	}
}

func TestFallbackBeforeTheFirstAssignment(t *testing.T) {
	fb := startTask(t, "fallback", "127.0.0.1:0")
	f := newFixture(t, 2, grpcroute.Config{Fallback: []string{fb.addr}})
	got, err := who(grpcroute.WithKeyString(ctxTimeout(t), "k"), f.conn)
	if err != nil || got != "fallback" {
		t.Fatalf("before any assignment: %q, %v; want the fallback", got, err)
	}
	a := clerktest.Uniform("kv", 1, f.assignTasks(), 4)
	f.publish(a)
	checkRouted(t, f.conn, a, grpcroute.WithKeyString)
}

func TestBadConfig(t *testing.T) {
	good := clerk.DefaultConfig()
	good.Addrs = []string{"127.0.0.1:1"}
	withJob := good
	withJob.Job = "kv"
	for name, cfg := range map[string]grpcroute.Config{
		"job set":         {Clerk: withJob},
		"no servers":      {Clerk: clerk.DefaultConfig()},
		"bad header":      {Clerk: good, KeyHeader: "x user"},
		"reserved header": {Clerk: good, KeyHeader: "grpc-timeout"},
		"empty fallback":  {Clerk: good, Fallback: []string{""}},
	} {
		if _, err := grpcroute.NewBuilder(cfg); !errors.Is(err, clerk.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	b, err := grpcroute.NewBuilder(grpcroute.Config{Clerk: good})
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"slicer:///", "slicer:///bad job", "slicer://host/kv"} {
		conn, err := grpc.NewClient(target, grpc.WithResolvers(b), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			continue
		}
		// The resolver is built when the channel first connects.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = who(ctx, conn)
		cancel()
		conn.Close()
		if err == nil {
			t.Errorf("target %q: a call succeeded", target)
		}
	}
}
