package clerk_test

import (
	"context"
	"fmt"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/clerk/clerktest"
)

func Example() {
	// A stand-in for slicerd's Distributor, serving one assignment.
	srv, err := clerktest.NewServer()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	srv.Publish(clerktest.Uniform("kv", 1, []assign.Task{
		{Name: "kv-0", Addr: "10.0.0.1:8080"},
		{Name: "kv-1", Addr: "10.0.0.2:8080"},
	}, 4))

	cfg := clerk.DefaultConfig()
	cfg.Job = "kv"
	cfg.Addrs = []string{srv.Addr()}
	c, err := clerk.New(cfg)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	wait, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := c.WaitReady(wait); err != nil {
		panic(err)
	}
	fmt.Println(c.AssignedTaskNames([]byte("user:42")), c.AssignedTasksString("user:42"))
	// Output: [kv-1] [10.0.0.2:8080]
}
