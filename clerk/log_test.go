package clerk_test

import (
	"strings"
	"testing"

	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/internal/testwait"
)

// A job slicerd does not know yet is the normal state while the job's
// first task joins: the Clerk says so at INFO. It warns when no server
// answers at all.
func TestUnknownJobIsNotAWarning(t *testing.T) {
	srv := newServer(t)
	var logs logBuffer
	cfg := testConfig(srv.Addr())
	cfg.Logger = logs.logger()
	c := start(t, cfg)
	testwait.For(t, "a few NOT_FOUND attempts", func() bool { return len(srv.Requests()) >= 3 })
	if out := logs.String(); strings.Contains(out, "level=WARN") || !strings.Contains(out, "level=INFO msg=\"clerk: slicerd does not know the job yet") {
		t.Errorf("a job not known yet should be logged at INFO, without warnings; logged:\n%s", out)
	}

	srv.Publish(clerktest.Uniform(job, 1, tasks, 2))
	waitGen(t, c, 1)
	srv.Close()
	testwait.For(t, "a warning that no server answers", func() bool {
		return strings.Contains(logs.String(), "level=WARN msg=\"clerk: no slicerd server answered")
	})
}

// A server that cannot be reached is worth a warning even when another
// answers that it does not know the job.
func TestUnreachableServerWarnsBesideUnknownJob(t *testing.T) {
	srv := newServer(t)
	var logs logBuffer
	cfg := testConfig(srv.Addr(), testnet.FreeAddr(t))
	cfg.Logger = logs.logger()
	start(t, cfg)
	testwait.For(t, "a warning that no server answered", func() bool {
		return strings.Contains(logs.String(), "level=WARN msg=\"clerk: no slicerd server answered")
	})
	if out := logs.String(); strings.Contains(out, "does not know the job") {
		t.Errorf("an unreachable server was reported as a job not known yet:\n%s", out)
	}
}
