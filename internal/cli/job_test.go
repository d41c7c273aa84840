package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/urfave/cli/v2"
	"go.uber.org/goleak"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/roles"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/storage"
)

// startAssigner runs an in-process assigner for the job commands to talk to.
func startAssigner(t *testing.T) string {
	t.Helper()
	return startNode(t, gossip.RoleAssigner)
}

// startNode runs an in-process slicerd node with the given roles and
// returns its RPC address.
func startNode(t *testing.T, rs ...gossip.Role) string {
	t.Helper()
	return startNodeWith(t, nil, rs...).RPCAddr()
}

// startNodeWith is startNode with edit applied to the node's configuration,
// returning the running agent.
func startNodeWith(t *testing.T, edit func(*roles.Config), rs ...gossip.Role) *roles.Agent {
	t.Helper()
	cfg := roles.TestConfig("cli-test")
	cfg.Roles = rs
	cfg.DataDir = t.TempDir()
	if slices.Equal(rs, []gossip.Role{gossip.RoleBackup}) {
		// A backup alone opens the store read-only: it must exist.
		st, err := storage.OpenDataDir(cfg.DataDir, storage.BoltOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	if edit != nil {
		edit(&cfg)
	}
	agent, err := roles.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent Run: %v", err)
		}
	})
	return agent
}

// slicerd runs the CLI in-process and returns its exit code and output.
func slicerd(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := run(append([]string{"slicerd"}, args...), &out, &out)
	return code, out.String()
}

// hasSetting reports whether out has a line "name value", e.g.
// "    move churn           0.2 (default)".
func hasSetting(out, name, value string) bool {
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), name+" ")
		if f := strings.Fields(rest); ok && len(f) > 0 && f[0] == value {
			return true
		}
	}
	return false
}

func TestJobSetChangesOnlyGivenFlags(t *testing.T) {
	// Registered first, so it runs after the assigner has stopped.
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	addr := startAssigner(t)
	set := func(args ...string) (int, string) {
		return slicerd(t, append(append([]string{"job", "set", "--addr", addr}, args...), "kv")...)
	}

	// A new job: the flags given, defaults for the rest.
	code, out := set("--move-churn", "0.2", "--min-slices-per-task", "10")
	if code != 0 {
		t.Fatalf("job set: exit %d\n%s", code, out)
	}
	for _, want := range [][2]string{
		{"min redundancy", "1"}, {"max redundancy", "1"}, {"configured", "true"},
		{"move churn", "0.2"}, {"min slices per task", "10"}, {"max slices per task", "150"},
		{"merge churn", "0.01"}, {"split load factor", "2"}, {"suppress below", "0"},
	} {
		if !hasSetting(out, want[0], want[1]) {
			t.Errorf("job set output lacks %s %s:\n%s", want[0], want[1], out)
		}
	}

	// A second set keeps what the first stored.
	code, out = set("--min-redundancy", "2", "--max-redundancy", "3", "--merge-churn", "0.05",
		"--merge-load-factor", "0.5", "--split-load-factor", "4", "--suppress-below", "12.5", "--max-slices-per-task", "90")
	if code != 0 {
		t.Fatalf("job set: exit %d\n%s", code, out)
	}
	want := [][2]string{
		{"min redundancy", "2"}, {"max redundancy", "3"}, {"move churn", "0.2"}, {"min slices per task", "10"},
		{"max slices per task", "90"}, {"merge churn", "0.05"}, {"merge load factor", "0.5"},
		{"split load factor", "4"}, {"suppress below", "12.5"},
	}
	code, out = slicerd(t, "job", "get", "--addr", addr, "kv")
	if code != 0 {
		t.Fatalf("job get: exit %d\n%s", code, out)
	}
	for _, w := range want {
		if !hasSetting(out, w[0], w[1]) {
			t.Errorf("job get output lacks %s %s:\n%s", w[0], w[1], out)
		}
	}

	// Invalid values are refused, clearly, and change nothing.
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--move-churn", "1.5"}, 1, "move churn is 1.5"},
		{[]string{"--merge-churn", "-0.1"}, 1, "merge churn is -0.1"},
		{[]string{"--merge-load-factor", "NaN"}, 1, "merge load factor"},
		{[]string{"--split-load-factor", "1"}, 1, "split load factor 1 must be above 1"},
		{[]string{"--suppress-below", "1e16"}, 1, "suppress below"},
		{[]string{"--min-slices-per-task", "200"}, 1, "max slices per task 90 is below min slices per task 200"},
		{[]string{"--max-slices-per-task", "20000"}, 1, "max slices per task 20000 is above the limit"},
		{[]string{"--min-slices-per-task", "-1"}, 2, "invalid --min-slices-per-task -1"},
		{[]string{"--min-redundancy", "0"}, 1, "min redundancy is 0"},
		{[]string{"--min-redundancy", "4"}, 2, "give --max-redundancy as well"},
		{[]string{"--max-redundancy", "65"}, 1, "above the limit"},
		{[]string{"--move-churn", "lots"}, 2, "invalid value"},
	} {
		code, out := set(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.msg) {
			t.Errorf("job set %v: exit %d, output:\n%s\nwant exit %d and %q", tc.args, code, out, tc.code, tc.msg)
		}
	}
	code, out = slicerd(t, "job", "get", "--addr", addr, "kv")
	for _, w := range want {
		if code != 0 || !hasSetting(out, w[0], w[1]) {
			t.Errorf("after invalid sets, job get lacks %s %s (exit %d):\n%s", w[0], w[1], code, out)
		}
	}

	// 0 restores a setting's default; a set with no flags changes nothing.
	if code, out = set("--move-churn", "0", "--min-slices-per-task", "0"); code != 0 {
		t.Fatalf("job set: exit %d\n%s", code, out)
	}
	if !hasSetting(out, "move churn", "0.09") || !hasSetting(out, "min slices per task", "50") || !strings.Contains(out, "0.09 (default)") {
		t.Errorf("zeros did not restore the defaults:\n%s", out)
	}
	if code, out = set(); code != 0 || !hasSetting(out, "merge churn", "0.05") || !hasSetting(out, "max redundancy", "3") {
		t.Errorf("job set with no flags: exit %d\n%s", code, out)
	}
}

func TestJobSetUnreachable(t *testing.T) {
	code, out := slicerd(t, "job", "set", "--addr", "127.0.0.1:1", "--move-churn", "0.1", "kv")
	if code != 1 || !strings.Contains(out, "cannot reach slicerd at 127.0.0.1:1") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

// agentConfigOf parses agent flags as slicerd would, without starting it.
func agentConfigOf(t *testing.T, env map[string]string, args ...string) (roles.Config, int, string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var out bytes.Buffer
	app := NewApp("", &out, &out)
	var cfg roles.Config
	app.Action = func(c *cli.Context) error {
		var err error
		cfg, err = agentConfig(c, nil)
		return err
	}
	code := 0
	if err := app.Run(append([]string{"slicerd"}, args...)); err != nil {
		code = 1
		if ec, ok := err.(cli.ExitCoder); ok {
			code = ec.ExitCode()
		}
		out.WriteString(err.Error())
	}
	return cfg, code, out.String()
}

func TestRebalanceIntervalFlag(t *testing.T) {
	cfg, code, out := agentConfigOf(t, nil)
	if code != 0 || cfg.RebalanceInterval != 4*time.Second {
		t.Errorf("default: interval %v, exit %d: %s", cfg.RebalanceInterval, code, out)
	}
	cfg, code, out = agentConfigOf(t, nil, "--rebalance-interval", "0")
	if code != 0 || cfg.RebalanceInterval != 0 {
		t.Errorf("--rebalance-interval 0: interval %v, exit %d: %s", cfg.RebalanceInterval, code, out)
	}
	cfg, code, out = agentConfigOf(t, map[string]string{"SLICERD_REBALANCE_INTERVAL": "3s"})
	if code != 0 || cfg.RebalanceInterval != 3*time.Second {
		t.Errorf("SLICERD_REBALANCE_INTERVAL=3s: interval %v, exit %d: %s", cfg.RebalanceInterval, code, out)
	}
	_, code, out = agentConfigOf(t, nil, "--rebalance-interval", "-1s")
	if code != 2 || !strings.Contains(out, "rebalance interval (--rebalance-interval) is -1s; it must not be negative") {
		t.Errorf("--rebalance-interval -1s: exit %d: %s", code, out)
	}
	_, code, out = agentConfigOf(t, nil, "--rebalance-interval", "often")
	if code != 2 || !strings.Contains(out, "rebalance-interval") {
		t.Errorf("--rebalance-interval often: exit %d: %s", code, out)
	}
}

func TestPrintJobLoad(t *testing.T) {
	var out bytes.Buffer
	printJob(&out, &slicerv1.JobInfo{
		Name: "kv", Generation: 7, Config: &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 2},
		TotalLoad: 300, Imbalance: 1.5, ReportingTasks: 2,
		TaskLoads: []*slicerv1.TaskLoad{{Task: "kv-0", Load: 150}, {Task: "kv-1", Load: 100}, {Task: "kv-2", Load: 50}},
	})
	for _, want := range []string{
		"job kv\n", "generation      7\n", "max redundancy  2\n",
		"load            300/s reported by 2 tasks\n", "imbalance       1.500\n",
		"    kv-0                        150/s   1.50 x mean\n",
		"    kv-2                         50/s   0.50 x mean\n",
		"    max slices per task  150 (default)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printJob output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	printJob(&out, &slicerv1.JobInfo{Name: "idle", Config: &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 1}})
	if !strings.Contains(out.String(), "load            no reports\n") || strings.Contains(out.String(), "imbalance") {
		t.Errorf("printJob of a job without load:\n%s", out.String())
	}
}

// TestJobCommandsNameTheirRole runs every job subcommand against a node of
// each role: a node that does not serve the command says which role does
// and what to do, instead of an HTTP 404.
func TestJobCommandsNameTheirRole(t *testing.T) {
	nodes := map[gossip.Role]string{
		gossip.RoleAssigner:    startNode(t, gossip.RoleAssigner),
		gossip.RoleDistributor: startNode(t, gossip.RoleDistributor),
		gossip.RoleBackup:      startNode(t, gossip.RoleBackup),
	}
	for _, tc := range []struct {
		args   []string
		served gossip.Role
	}{
		{[]string{"list"}, gossip.RoleAssigner},
		{[]string{"get", "kv"}, gossip.RoleAssigner},
		{[]string{"set", "kv"}, gossip.RoleAssigner},
		{[]string{"watch", "kv"}, gossip.RoleDistributor},
	} {
		for _, role := range []gossip.Role{gossip.RoleAssigner, gossip.RoleDistributor, gossip.RoleBackup} {
			if role == tc.served {
				continue
			}
			addr := nodes[role]
			args := append([]string{"job", tc.args[0], "--addr", addr}, tc.args[1:]...)
			code, out := slicerd(t, args...)
			want := fmt.Sprintf("job %s is served by the %s role; %s runs no %s: point --addr at a node started with --role including %s",
				tc.args[0], tc.served, addr, tc.served, tc.served)
			if code != 1 || !strings.Contains(out, want) || strings.Contains(out, "HTTP status 404") {
				t.Errorf("slicerd %s against a %s: exit %d, output:\n%s\nwant exit 1 and %q", strings.Join(args, " "), role, code, out, want)
			}
		}
	}
}

// TestJobHelpNamesTheRole checks that each job subcommand's help names the
// role that serves it, and no other.
func TestJobHelpNamesTheRole(t *testing.T) {
	for sub, role := range map[string]string{"list": "assigner", "get": "assigner", "set": "assigner", "watch": "distributor"} {
		code, out := slicerd(t, "job", sub, "--help")
		other := "distributor"
		if role == "distributor" {
			other = "assigner"
		}
		if code != 0 || !strings.Contains(out, "running the "+role+" role") || strings.Contains(out, other) {
			t.Errorf("job %s --help: exit %d; want it to name the %s role and not the %s:\n%s", sub, code, role, other, out)
		}
	}
	code, out := slicerd(t, "job", "--help")
	if code != 0 || !strings.Contains(out, "assigner") || !strings.Contains(out, "distributor") {
		t.Errorf("job --help: exit %d; want it to name both roles:\n%s", code, out)
	}
}

// A server's error reaches the user as the command, its job and the
// server's message, without the error's code or the package prefixes of
// the server's sentinel errors, except where the code tells something.
func TestServerErrorsArePlain(t *testing.T) {
	addr := startAssigner(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "set", "--min-redundancy", "3", "--max-redundancy", "2", "kv"}, "slicerd: job set kv: max redundancy 2 is below min redundancy 3\n"},
		{[]string{"job", "set", "kü"}, `slicerd: job set kü: job name "kü" has 'ü' at byte 1; use lower-case letters`},
		{[]string{"job", "get", "nosuch"}, `slicerd: job get nosuch: unknown job "nosuch": no task of it has joined`},
	} {
		code, out := slicerd(t, append(tc.args, "--addr", addr)...)
		if code != 1 || !strings.HasPrefix(out, tc.want) {
			t.Errorf("slicerd %s: exit %d:\n%s\nwant exit 1 and %q", strings.Join(tc.args, " "), code, out, tc.want)
		}
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%w: job name %q is bad", assign.ErrInvalidName, "x")), `job name "x" is bad`},
		{connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%w: job %q has 1 live task(s)", rpc.ErrLiveTasks, "kv")), `job has live tasks: job "kv" has 1 live task(s)`},
		{connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%w: at most 3", rpc.ErrTooManyJobs)), "resource exhausted: too many jobs: at most 3"},
		{connect.NewError(connect.CodePermissionDenied, errors.New("client x may not change job configuration")), "permission denied: client x may not change job configuration"},
		{connect.NewError(connect.CodeInternal, errors.New("disk on fire")), "internal: disk on fire"},
	} {
		if got := serverMessage(tc.err); got != tc.want {
			t.Errorf("serverMessage(%v) = %q; want %q", tc.err, got, tc.want)
		}
	}
}
