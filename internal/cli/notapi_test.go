package cli

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/grpchealth"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/roles"
)

// Pointed at something that answers but is not slicerd's API, a command
// says so and what --addr should be, instead of an HTTP/2 error or "runs
// no assigner".
func TestAddrNotSlicerdAPI(t *testing.T) {
	// A plain HTTP/1 server, as the kvcache example's kvserver.
	h1 := httptest.NewServer(http.NotFoundHandler())
	defer h1.Close()

	// A Connect and gRPC server over cleartext HTTP/2 that serves gRPC
	// health but none of slicerd's services, as other gRPC servers do.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(grpchealth.NewHandler(grpchealth.NewStaticChecker()))
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	h2 := &http.Server{Handler: mux, Protocols: protocols}
	go h2.Serve(ln)
	defer h2.Close()

	// slicerd's own web UI port.
	agent := startNodeWith(t, func(cfg *roles.Config) { cfg.UIAddr = "127.0.0.1:0" }, gossip.RoleAssigner)

	for name, addr := range map[string]string{
		"an HTTP/1 server":         strings.TrimPrefix(h1.URL, "http://"),
		"a gRPC server":            ln.Addr().String(),
		"slicerd's web UI address": agent.UIAddr(),
	} {
		for _, args := range [][]string{{"job", "list"}, {"job", "get", "kv"}, {"job", "set", "kv"}, {"job", "history", "kv"}, {"task", "cordon", "kv", "kv-0"}, {"keyring", "list"}} {
			code, out := slicerd(t, append(args, "--addr", addr)...)
			if code != 1 || !strings.Contains(out, addr+" ") || !strings.Contains(out, "not a slicerd API address (did you point --addr at") ||
				strings.Contains(out, "http2") || strings.Contains(out, "runs no") {
				t.Errorf("slicerd %s against %s: exit %d:\n%s\nwant exit 1 saying %s is not a slicerd API address", strings.Join(args, " "), name, code, out, addr)
			}
		}
	}
	// The API port itself still works.
	if code, out := slicerd(t, "job", "list", "--addr", agent.RPCAddr()); code != 0 {
		t.Errorf("job list against the API: exit %d:\n%s", code, out)
	}
}
