package slicelet_test

import (
	"context"
	"fmt"
	"log"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/slicelet"
)

// cache drops the entries of ranges this task no longer serves.
type cache struct{}

func (cache) OnChangedSlices(assigned, unassigned []assign.Slice) {
	for _, r := range unassigned {
		fmt.Printf("drop keys hashing into [%#x, %#x)\n", r.Start, r.End)
	}
}

func Example() {
	sl, err := slicelet.New(slicelet.Config{
		Job:  "kv",
		Task: "kv-0",
		Addr: "127.0.0.1:8080",
		Join: []string{"127.0.0.1:7946"},
	})
	if err != nil {
		log.Fatal(err)
	}
	sl.AddListener(cache{})

	// Serve until Run returns: it leaves gossip first, so requests routed
	// on the old assignment still land.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sl.Run(ctx) }()
	<-sl.Ready()
	fmt.Println(sl.IsAffinitizedKeyString("user:42"))

	cancel()
	if err := <-done; err != nil {
		log.Print(err)
	}
}
