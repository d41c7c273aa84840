package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testlog"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/roles"
)

func TestRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-gossip-profile", "wan"}, "invalid -gossip-profile"},
		{[]string{"-log-level", "loud"}, "invalid -log-level"},
		{[]string{"-load-window", "0s"}, "invalid -load-window"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"-nope"}, "flag provided but not defined"},
		{[]string{"-task", "bad name"}, "kvserver:"},
		{[]string{"-join", ""}, "nothing to join"},
		{[]string{"-cache-file", "/nonexistent-dir/kv-0.cache"}, "cache file"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), tc.args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr: %s", tc.args, code, errOut.String())
		}
		if !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, errOut.String(), tc.want)
		}
		if out.Len() != 0 {
			t.Errorf("%v: wrote %q to stdout", tc.args, out.String())
		}
	}
}

// A task that starts against a running slicerd, receives its assignment
// and stops logs nothing above INFO: a warning in a normal start teaches
// operators to ignore warnings. Its -metrics-addr serves the Slicelet's
// metrics meanwhile.
func TestNormalStartLogsNoWarning(t *testing.T) {
	cfg := roles.DefaultConfig()
	cfg.NodeName = "slicerd-0"
	cfg.DataDir = t.TempDir()
	cfg.RPCAddr = "127.0.0.1:0"
	cfg.Gossip = gossip.DefaultConfig()
	cfg.Gossip.BindAddr = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.DiscardHandler)
	agent, err := roles.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Run(actx) }()
	defer func() {
		stopAgent()
		if err := <-agentDone; err != nil {
			t.Errorf("slicerd agent: %v", err)
		}
	}()
	testwait.For(t, "slicerd's gossip to start", func() bool { return agent.GossipAddr() != "" })

	var out, errOut testlog.Buffer
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-job", "kv", "-task", "kv-0", "-join", agent.GossipAddr(), "-metrics-addr", "127.0.0.1:0"}, &out, &errOut)
	}()
	testwait.For(t, "kvserver to stream its job's assignment", func() bool {
		return strings.Contains(errOut.String(), "clerk: streaming assignments")
	})
	m := regexp.MustCompile(`metrics_addr=(\S+)`).FindStringSubmatch(errOut.String())
	if m == nil {
		t.Fatalf("kvserver logged no metrics address:\n%s", errOut.String())
	}
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `slicerd_slicelet_assignment_generation{job="kv",task="kv-0"}`; !strings.Contains(string(body), want) {
		t.Errorf("kvserver's /metrics lacks %s:\n%s", want, body)
	}
	stop()
	if code := <-done; code != 0 {
		t.Errorf("kvserver exited %d; stderr:\n%s", code, errOut.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(errOut.String()), "\n") {
		if !strings.Contains(line, "level=INFO") && !strings.Contains(line, "level=DEBUG") {
			t.Errorf("a normal start and stop logged above INFO: %s", line)
		}
	}
}
