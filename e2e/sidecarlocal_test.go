package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/internal/testwait"
)

// otherUserCall is a client of the local API, run as another user: it
// asks the sidecar to drain the task and to take a handle, and prints
// what happened to each.
const otherUserCall = `
import socket, sys
for method, body in (("SetDraining", b'{"draining": true}'), ("AcquireHandle", b'{"key": "a2V5LTE="}')):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(sys.argv[1])
        s.sendall(b"POST /slicer.v1.SidecarService/%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (method.encode(), len(body), body))
        answer = s.recv(4096)
        print(method, "answered" if answer else "closed", answer[:40])
    except OSError as e:
        print(method, "refused", type(e).__name__)
`

// A process of another user on the host cannot use the sidecar's local
// API: the socket's mode keeps it from connecting, and if the mode is
// loosened the sidecar's peer-credential check closes its connection
// before it can drain the task or take a handle. The task keeps its keys.
func TestSidecarLocalAPIRefusesOtherUsers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to run a client as another user")
	}
	// The system's interpreter: one under root's home is not the other
	// user's to run.
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("no %s for the other user's client", py)
	}
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	defer app.Close()
	startKV(t, "kv-1", node.gossipAddr)
	// A directory others may enter, so that only the socket's mode and
	// the peer check stand in the way.
	dir, err := os.MkdirTemp("", "slicerd-local-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sidecar.sock")
	args := []string{"sidecar", "--job", "kv", "--task", "app-0", "--app-addr", app.Listener.Addr().String(), "--join", node.gossipAddr,
		"--health-interval", "200ms", "--local-api-socket", sock}
	sc := startEnv(t, "sidecar", bin.slicerd, append(append(os.Environ(), "SLICERD_LOG_FORMAT=json"), secureEnv(bin.slicerd, args)...), args...)
	sc.waitLine(30*time.Second, "sidecar local API serving")
	c := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	holds := func() bool {
		a := c.Assignment()
		return a != nil && slices.ContainsFunc(a.Slices, func(s assign.Slice) bool { return slices.Contains(s.Tasks, "app-0") })
	}
	testwait.Until(t, 30*time.Second, "app-0 to hold keys", holds)

	asNobody := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, py, "-c", otherUserCall, sock)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the other user's client: %v: %s", err, out)
		}
		return string(out)
	}
	out := asNobody()
	t.Logf("as uid 65534, socket mode 0600:\n%s", out)
	if strings.Count(out, "refused PermissionError") != 2 {
		t.Fatalf("another user reached the local API through a socket of mode 0600:\n%s", out)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	out = asNobody()
	t.Logf("as uid 65534, socket loosened to 0666:\n%s", out)
	if n := strings.Count(out, "closed") + strings.Count(out, "BrokenPipeError") + strings.Count(out, "ConnectionResetError"); n != 2 || strings.Contains(out, "answered") {
		t.Fatalf("the sidecar did not close both of another user's connections unanswered:\n%s", out)
	}
	if !holds() {
		t.Fatal("app-0 lost its keys after another user's calls")
	}
	// The sidecar's own user is still served.
	resp, err := localClient(sock).AcquireHandle(context.Background(), connect.NewRequest(&slicerv1.AcquireHandleRequest{Key: []byte("key-1")}))
	if err != nil {
		t.Fatalf("the sidecar's own user: %v", err)
	}
	t.Logf("the sidecar's own user took a handle: owned %v, token %d", resp.Msg.GetOwned(), resp.Msg.GetToken())
}
