package cli

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slicerd/slicerd/api"
)

// holdingProxy forwards every call to the agent at addr, holding the first
// SetJobConfig until release is closed; held is closed once it holds it.
func holdingProxy(t *testing.T, addr string, held, release chan struct{}) string {
	t.Helper()
	target, err := url.Parse("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     api.NewH2CClient().Transport,
		FlushInterval: -1,
	}
	var first atomic.Bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/SetJobConfig") && first.CompareAndSwap(false, true) {
			close(held)
			<-release
		}
		rp.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: protocols}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// Two operators' `job set` of different settings on one job, at the
// same time, both take effect (operations.md: "job set changes only the
// settings whose flags are given; every other setting keeps its stored
// value"): each writes only over the configuration it read, and the one
// whose read another write overtook reads again and applies its change
// to that. Written unconditionally, the one stored last would put back
// the other's setting as it read it, both reporting success; task
// drain/cordon and job pin/freeze share the read-modify-write, where two
// drains at once would leave one task undrained.
func TestConcurrentJobSetsKeepBothSettings(t *testing.T) {
	addr := startAssigner(t)
	if code, out := slicerd(t, "job", "set", "--addr", addr, "kv"); code != 0 {
		t.Fatalf("job set: exit %d\n%s", code, out)
	}
	held, release := make(chan struct{}), make(chan struct{})
	proxy := holdingProxy(t, addr, held, release)

	type result struct {
		code int
		out  string
	}
	first := make(chan result, 1)
	go func() {
		code, out := slicerd(t, "job", "set", "--addr", proxy, "--move-churn", "0.3", "kv")
		first <- result{code, out}
	}()
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the first job set never reached SetJobConfig")
	}
	if code, out := slicerd(t, "job", "set", "--addr", addr, "--merge-churn", "0.05", "kv"); code != 0 {
		t.Fatalf("second job set: exit %d\n%s", code, out)
	}
	close(release)
	if r := <-first; r.code != 0 {
		t.Fatalf("first job set: exit %d\n%s", r.code, r.out)
	}
	code, out := slicerd(t, "job", "get", "--addr", addr, "kv")
	if code != 0 {
		t.Fatalf("job get: exit %d\n%s", code, out)
	}
	if !hasSetting(out, "move churn", "0.3") {
		t.Errorf("the first job set's --move-churn 0.3 is not stored:\n%s", out)
	}
	if !hasSetting(out, "merge churn", "0.05") {
		t.Errorf("the second job set's --merge-churn 0.05 was lost, though it reported success:\n%s", out)
	}
}
