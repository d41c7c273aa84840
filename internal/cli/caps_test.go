package cli

import (
	"strings"
	"testing"

	"github.com/slicerd/slicerd/roles"
)

func TestStreamJobAndLoadLimitFlags(t *testing.T) {
	d := roles.DefaultConfig()
	cfg, code, out := agentConfigOf(t, nil)
	if code != 0 || cfg.MaxStreams != d.MaxStreams || cfg.MaxStreamsPerConnection != d.MaxStreamsPerConnection ||
		cfg.MaxJobs != d.MaxJobs || cfg.MaxSlicesPerJob != d.MaxSlicesPerJob ||
		cfg.MaxLoadReportsPerSecond != d.MaxLoadReportsPerSecond || cfg.LoadReportBurst != d.LoadReportBurst {
		t.Errorf("defaults: %+v, exit %d: %s", cfg, code, out)
	}
	if d.MaxStreams < 100_000 || d.MaxStreamsPerConnection < 100_000/100 {
		t.Errorf("default stream caps %d, %d per connection: too low for 100,000 subscribers over 100 connections",
			d.MaxStreams, d.MaxStreamsPerConnection)
	}
	cfg, code, out = agentConfigOf(t, map[string]string{
		"SLICERD_MAX_STREAMS": "500", "SLICERD_MAX_STREAMS_PER_CONNECTION": "50", "SLICERD_MAX_JOBS": "7",
		"SLICERD_MAX_SLICES_PER_JOB": "900", "SLICERD_MAX_LOAD_REPORTS_PER_SECOND": "0.5", "SLICERD_LOAD_REPORT_BURST": "3",
		"SLICERD_MAX_STARTING_RPCS": "128",
	})
	if code != 0 || cfg.MaxStreams != 500 || cfg.MaxStreamsPerConnection != 50 || cfg.MaxJobs != 7 || cfg.MaxStartingRPCs != 128 ||
		cfg.MaxSlicesPerJob != 900 || cfg.MaxLoadReportsPerSecond != 0.5 || cfg.LoadReportBurst != 3 {
		t.Errorf("from the environment: %+v, exit %d: %s", cfg, code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-streams", "0"}, "max streams (--max-streams) is 0; it must be positive"},
		{[]string{"--max-streams-per-connection", "-1"}, "max streams per connection (--max-streams-per-connection) is -1"},
		{[]string{"--max-starting-rpcs", "-1"}, "max starting RPCs (--max-starting-rpcs) is -1"},
		{[]string{"--max-jobs", "0"}, "max jobs (--max-jobs) is 0; it must be positive"},
		{[]string{"--max-slices-per-job", "0"}, "max slices per job (--max-slices-per-job) is 0"},
		{[]string{"--max-load-reports-per-second", "0"}, "max load reports per second (--max-load-reports-per-second) is 0"},
		{[]string{"--max-load-reports-per-second", "NaN"}, "max load reports per second"},
		{[]string{"--load-report-burst", "0"}, "load report burst (--load-report-burst) is 0"},
	} {
		if _, code, out := agentConfigOf(t, nil, tc.args...); code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d: %s; want exit 2 saying %q", tc.args, code, out, tc.want)
		}
	}
	// A value the environment set is traced to its variable; one the
	// command line overrides is not.
	env := map[string]string{"SLICERD_MAX_JOBS": "0"}
	if _, code, out := agentConfigOf(t, env); code != 2 || !strings.Contains(out, "max jobs (--max-jobs, set by SLICERD_MAX_JOBS=0 in the environment) is 0") {
		t.Errorf("SLICERD_MAX_JOBS=0: exit %d: %s; want exit 2 naming the variable", code, out)
	}
	if _, code, out := agentConfigOf(t, env, "--max-jobs", "-3"); code != 2 || !strings.Contains(out, "max jobs (--max-jobs) is -3") {
		t.Errorf("SLICERD_MAX_JOBS=0 and --max-jobs -3: exit %d: %s; want exit 2 naming the flag alone", code, out)
	}
}
