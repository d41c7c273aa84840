package testnet

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/slicerd/slicerd/gossip"
)

// TaskMember joins gossip at join as task of job, the way a Slicelet
// does, with the gossip keys given (none: unencrypted), and leaves at the
// end of the test. log may be nil.
func TaskMember(t testing.TB, job, task, join string, log *slog.Logger, keys ...[]byte) *gossip.Node {
	t.Helper()
	cfg := gossip.TestConfig(gossip.TaskMemberName(job, task))
	cfg.Self = gossip.Peer{Roles: []gossip.Role{gossip.RoleTask}, Job: job, Task: task, RPCAddr: "127.0.0.1:1" + fmt.Sprint(len(task))}
	cfg.Keys = keys
	if log != nil {
		cfg.Logger = log
	}
	n, err := gossip.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown() })
	// Retried: on a loaded machine one join can exceed the test profile's
	// short TCP timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.RetryJoin(ctx, []string{join}, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	return n
}
