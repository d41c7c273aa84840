package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runNode starts a node with args, calls while with its log once it has
// started, then stops it and checks it exited 0.
func runNode(t *testing.T, args []string, while func(logs string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := newLineWriter()
	done := make(chan int, 1)
	base := []string{"slicerd", "--node-name", "n1", "--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
		"--gossip-profile", "local", "--startup-grace", "10ms", "--data-dir", t.TempDir()}
	go func() { done <- runContext(ctx, append(base, args...), logs, logs) }()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for !strings.Contains(logs.String(), `msg="slicerd started"`) {
		select {
		case <-logs.written:
		case code := <-done:
			t.Fatalf("slicerd %v exited %d before starting:\n%s", args, code, logs.String())
		case <-deadline.C:
			t.Fatalf("slicerd %v did not log its start:\n%s", args, logs.String())
		}
	}
	while(logs.String())
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("slicerd %v exited %d:\n%s", args, code, logs.String())
	}
}

// logged returns the value of key in the first log line with msg.
func logged(t *testing.T, logs, msg, key string) string {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `msg="`+msg+`"`) {
			continue
		}
		if m := regexp.MustCompile(`\b` + key + `=(\S+)`).FindStringSubmatch(line); m != nil {
			return m[1]
		}
	}
	t.Fatalf("no log line %q with %s:\n%s", msg, key, logs)
	return ""
}

// TestMetricsAddr scrapes a node started with --metrics-addr, and checks
// that the port closes when the node stops.
func TestMetricsAddr(t *testing.T) {
	var addr string
	runNode(t, []string{"--metrics-addr", "127.0.0.1:0"}, func(logs string) {
		addr = logged(t, logs, "serving metrics", "metrics_addr")
		hc := &http.Client{Transport: &http.Transport{}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics = %d:\n%s", resp.StatusCode, body)
		}
		for _, want := range []string{
			`slicerd_gossip_members{state="alive"} 1`,
			"# TYPE slicerd_rpc_streams_open gauge",
			"# TYPE slicerd_distributor_updates_sent_total counter",
			"# TYPE slicerd_store_commit_duration_seconds histogram",
			"go_goroutines ",
			"process_open_fds ",
		} {
			if !strings.Contains(string(body), want) {
				t.Errorf("GET /metrics lacks %q:\n%s", want, body)
			}
		}
	})
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("metrics port %s still open after the node stopped", addr)
	}
}

// TestMetricsPortOnlyWhenAsked lists the TCP ports this process listens on
// while a node runs: the RPC and gossip ports, and a metrics port only
// with --metrics-addr.
func TestMetricsPortOnlyWhenAsked(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the process's sockets from /proc")
	}
	before := listeningPorts(t)
	for _, tc := range []struct {
		args    []string
		metrics bool
	}{{nil, false}, {[]string{"--metrics-addr", "127.0.0.1:0"}, true}} {
		runNode(t, tc.args, func(logs string) {
			want := map[int]bool{}
			for _, addr := range []string{logged(t, logs, "slicerd started", "rpc_addr"), logged(t, logs, "slicerd started", "gossip_addr")} {
				want[port(t, addr)] = true
			}
			if tc.metrics {
				want[port(t, logged(t, logs, "serving metrics", "metrics_addr"))] = true
			} else if strings.Contains(logs, "metrics_addr") {
				t.Errorf("without --metrics-addr the node logged a metrics address:\n%s", logs)
			}
			got := map[int]bool{}
			for p := range listeningPorts(t) {
				if !before[p] {
					got[p] = true
				}
			}
			if len(got) != len(want) {
				t.Errorf("%v: the node listens on TCP ports %v, want %v (RPC, gossip%s)", tc.args, got, want, map[bool]string{true: ", metrics"}[tc.metrics])
			}
			for p := range want {
				if !got[p] {
					t.Errorf("%v: port %d not among the ports listened on, %v", tc.args, p, got)
				}
			}
		})
	}
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.Trim(addr, `"`))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// listeningPorts returns the local ports of the TCP sockets this process
// listens on, read from /proc: the sockets among the process's file
// descriptors that the kernel's TCP tables list in state LISTEN.
func listeningPorts(t *testing.T) map[int]bool {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	ports := map[int]bool{}
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue // no IPv6
		}
		s := bufio.NewScanner(f)
		s.Scan() // header
		for s.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(s.Text())
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); err == nil {
				ports[int(p)] = true
			}
		}
		f.Close()
	}
	return ports
}

func TestMetricsAddrFromEnvironment(t *testing.T) {
	t.Setenv("SLICERD_METRICS_ADDR", "127.0.0.1:0")
	runNode(t, nil, func(logs string) {
		if addr := logged(t, logs, "serving metrics", "metrics_addr"); port(t, addr) == 0 {
			t.Errorf("metrics address %s has no port", addr)
		}
	})
}

func TestMetricsAddrRefused(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct{ addr, want string }{
		{"9464", "invalid --metrics-addr"},
		{busy.Addr().String(), "choose another --metrics-addr"},
	} {
		var out strings.Builder
		args := []string{"slicerd", "--node-name", "n1", "--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
			"--data-dir", t.TempDir(), "--metrics-addr", tc.addr}
		if code := run(args, &out, &out); code != 2 || !strings.Contains(out.String(), tc.want) {
			t.Errorf("--metrics-addr %s: exit %d, want 2 saying %q:\n%s", tc.addr, code, tc.want, out.String())
		}
	}
}

// --ui-addr and --metrics-addr the same: one port answers both the UI and
// the scrape.
func TestMetricsOnUIAddr(t *testing.T) {
	runNode(t, []string{"--metrics-addr", "127.0.0.1:0", "--ui-addr", "127.0.0.1:0"}, func(logs string) {
		addr := logged(t, logs, "slicerd started", "ui_addr")
		if strings.Contains(logs, "serving metrics") {
			t.Errorf("a separate metrics port was opened:\n%s", logs)
		}
		hc := &http.Client{Transport: &http.Transport{}}
		defer hc.CloseIdleConnections()
		for path, want := range map[string]string{"/metrics": "# TYPE slicerd_rpc_streams_open gauge", "/ui/": "<html"} {
			resp, err := hc.Get("http://" + addr + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
				t.Errorf("GET %s = %d, want 200 with %q:\n%.500s", path, resp.StatusCode, want, body)
			}
		}
	})
}
