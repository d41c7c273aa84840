package e2e

import (
	"context"
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/internal/testwait"
)

func TestBadFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown role", []string{"--role", "assigner,boss"}, 2, `invalid --role "boss"`},
		{"task role", []string{"--role", "task"}, 2, "invalid --role"},
		{"bad rpc addr", []string{"--rpc-addr", "localhost"}, 2, `rpc address "localhost" is not host:port`},
		{"bad rpc port", []string{"--rpc-addr", "127.0.0.1:99999"}, 2, "invalid port"},
		{"unknown flag", []string{"--replicas", "3"}, 2, "flag provided but not defined: -replicas"},
		{"stray argument", []string{"serve"}, 2, `unknown command "serve" for 'slicerd'`},
		{"bad duration", []string{"--rebalance-delay", "soon"}, 2, "invalid value"},
		{"bad log level", []string{"--log-level", "loud"}, 2, "invalid --log-level"},
		{"bad gossip profile", []string{"--gossip-profile", "wan"}, 2, "invalid --gossip-profile"},
		{"data dir under a file", []string{"--data-dir", filepath.Join(file, "data"), "--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0"}, 1, file},
		{"job without name", []string{"job", "get"}, 2, "needs exactly one JOB argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runSlicerd(t, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("slicerd %v: exit %d, output:\n%s\nwant exit %d and %q", tc.args, code, out, tc.code, tc.want)
			}
		})
	}
}

// TestBadInputKeepsAssignment feeds a running node bad input of every kind
// and checks that each is refused clearly while the stored assignment
// survives, including across a restart on the same data directory.
func TestBadInputKeepsAssignment(t *testing.T) {
	dataDir := t.TempDir()
	node := startSlicerd(t, "node-1", "--data-dir", dataDir)
	task := startKV(t, "kv-0", node.gossipAddr)
	_ = task

	hc, rpcURL := rpcClient("")
	dist := slicerv1connect.NewDistributorServiceClient(hc, rpcURL(node.rpcAddr))
	backup := slicerv1connect.NewBackupServiceClient(hc, rpcURL(node.rpcAddr), connect.WithGRPC())
	ctx := context.Background()
	get := func() *slicerv1.Assignment {
		resp, err := backup.GetAssignment(ctx, connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "kv"}))
		if err != nil {
			return nil
		}
		return resp.Msg.GetAssignment()
	}
	testwait.Until(t, 30*time.Second, "a stored assignment for kv", func() bool { return get() != nil })
	stored := get()

	// A data file that is there but holds no store (0 bytes) is refused
	// and left as it is: slicerd never replaces it with an empty store.
	emptyDir := t.TempDir()
	emptyFile := filepath.Join(emptyDir, "slicerd.db")
	if err := os.WriteFile(emptyFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := runSlicerd(t, "--data-dir", emptyDir, "--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--node-name", "node-3")
	if fi, err := os.Stat(emptyFile); code != 1 || !strings.Contains(out, "empty (0 bytes)") || err != nil || fi.Size() != 0 {
		t.Errorf("slicerd on a 0-byte data file: exit %d, file %v %v; output:\n%s", code, fi, err, out)
	}

	// A second slicerd on the same data directory is refused.
	code, out = runSlicerd(t, "--data-dir", dataDir, "--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--node-name", "node-2")
	if code != 1 || !strings.Contains(out, "in use by another slicerd process") {
		t.Errorf("second slicerd on the same data dir: exit %d, output:\n%s", code, out)
	}

	// Garbage on the RPC port: the connection is dropped, the server lives on.
	for _, garbage := range [][]byte{[]byte("GET / HTTP/1.0\r\n\r\n"), []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\xff\xff\xff\xff"), randomBytes(t, 4096)} {
		conn, err := net.DialTimeout("tcp", node.rpcAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		conn.Write(garbage)
		buf := make([]byte, 512)
		conn.Read(buf)
		conn.Close()
	}

	// An unknown job is NOT_FOUND, over Connect and through the CLI.
	_, err := dist.GetAssignment(ctx, connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "nope"}))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), `unknown job "nope"`) {
		t.Errorf("unknown job: %v", err)
	}
	code, out = runSlicerd(t, "job", "get", "--addr", node.rpcAddr, "nope")
	if code != 1 || !strings.Contains(out, `unknown job "nope"`) {
		t.Errorf("job get nope: exit %d, output:\n%s", code, out)
	}
	// An invalid job name is INVALID_ARGUMENT.
	_, err = dist.GetAssignment(ctx, connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "Bad Job"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("invalid job name: %v", err)
	}
	// An oversized request is refused.
	_, err = dist.GetAssignment(ctx, connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: strings.Repeat("k", 2<<20)}))
	if err == nil {
		t.Errorf("a 2 MiB request was accepted")
	}

	// Invalid job configurations change nothing.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--min-redundancy", "0"}, "redundancy"},
		{[]string{"--min-redundancy", "3", "--max-redundancy", "2"}, "redundancy"},
		{[]string{"--min-redundancy", "1", "--max-redundancy", "1000"}, "redundancy"},
		{[]string{"--min-redundancy", "-1"}, "redundancy"},
		{[]string{"--move-churn", "2"}, "move churn is 2"},
		{[]string{"--split-load-factor", "0.5"}, "split load factor"},
		{[]string{"--min-slices-per-task", "500", "--max-slices-per-task", "100"}, "below min slices per task"},
		{[]string{"--suppress-below", "-5"}, "suppress below"},
		{[]string{"--consistency", "strong", "--max-redundancy", "2"}, "max redundancy must be 1, not 2"},
		{[]string{"--consistency", "eventual"}, "use affinity or strong"},
	} {
		code, out := runSlicerd(t, append([]string{"job", "set", "--addr", node.rpcAddr}, append(tc.args, "kv")...)...)
		if code == 0 || !strings.Contains(strings.ToLower(out), tc.want) {
			t.Errorf("job set kv %v: exit %d, output:\n%s\nwant a failure mentioning %q", tc.args, code, out, tc.want)
		}
	}
	code, out = runSlicerd(t, "job", "set", "--addr", node.rpcAddr, "Bad/Job")
	if code != 1 || !strings.Contains(out, "job name") {
		t.Errorf("job set with a bad name: exit %d, output:\n%s", code, out)
	}
	code, out = runSlicerd(t, "job", "get", "--addr", node.rpcAddr, "kv")
	if code != 0 || !strings.Contains(out, "min redundancy  1") || !strings.Contains(out, "move churn           0.09 (default)") ||
		!strings.Contains(out, "consistency     affinity") {
		t.Errorf("job get kv after bad sets: exit %d, output:\n%s", code, out)
	}

	if got := get(); !proto.Equal(got, stored) {
		t.Fatalf("stored assignment changed under bad input:\nbefore %v\nafter  %v", stored, got)
	}

	// Restart on the same data dir: the stored assignment is carried forward.
	node.signal(syscall.SIGTERM)
	if code := node.wait(20 * time.Second); code != 0 {
		t.Fatalf("slicerd exited %d after SIGTERM", code)
	}
	node = startSlicerd(t, "node-1", "--data-dir", dataDir, "--startup-grace", "30s")
	node.waitLine(10*time.Second, `"msg":"carrying stored assignment forward"`, `"generation":`)
	backup = slicerv1connect.NewBackupServiceClient(hc, rpcURL(node.rpcAddr))
	testwait.Until(t, 10*time.Second, "the backup serving after restart", func() bool { return get() != nil })
	if got := get(); !proto.Equal(got, stored) {
		t.Fatalf("assignment after restart differs:\nbefore %v\nafter  %v", stored, got)
	}
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
