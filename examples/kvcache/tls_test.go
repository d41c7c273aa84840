package kvcache_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/clerk/cachefile"
	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/tlsconfig"
	"github.com/slicerd/slicerd/tlsconfig/tlstest"
)

// tlsTask serves GET /kv/KEY on TLS with the certificate of src, behind
// RequireJobPeer for job kv (in cleartext, to anyone, for a nil src), and
// counts the requests that reached it.
type tlsTask struct {
	addr   string
	served atomic.Int64
}

func startTLSTask(t testing.TB, src *tlsconfig.Source) *tlsTask {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	task := &tlsTask{addr: ln.Addr().String()}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		task.served.Add(1)
		io.WriteString(w, task.addr)
	})
	if src != nil {
		h = kvcache.RequireJobPeer("kv", h)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0), // refused handshakes are the point
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if src == nil {
			srv.Serve(ln)
			return
		}
		srv.TLSConfig = src.ServerConfig()
		srv.ServeTLS(ln, "", "")
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return task
}

// clerkAt returns a Clerk of job kv with TLS src whose assignment, read
// from its cache file, gives every key to task kv-1 at addr.
func clerkAt(t testing.TB, src *tlsconfig.Source, addr string) *clerk.Clerk {
	t.Helper()
	cache := filepath.Join(t.TempDir(), "kv.assignment")
	a := clerktest.Uniform("kv", 1, []assign.Task{{Name: "kv-1", Addr: addr}}, 1)
	if err := cachefile.Write(cache, a); err != nil {
		t.Fatal(err)
	}
	c, err := clerk.New(clerk.Config{Job: "kv", Addrs: []string{"127.0.0.1:1"}, TLS: src, CacheFile: cache})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A client with TLS reaches a task only if the task's certificate names the
// task the assignment places at the address: an address that serves
// another task's certificate, or another job's, gets no request, while the
// right task gets them all. The task in turn serves only the job's clients
// and tasks.
func TestClientVerifiesTheTasksCertificate(t *testing.T) {
	pki := tlstest.New(t, "kvcache-test")
	client := pki.Source("client-kv", identity.ID{Role: identity.Client, Job: "kv"})
	right := startTLSTask(t, pki.Source("task-kv-1", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-1"}))
	otherTask := startTLSTask(t, pki.Source("task-kv-2", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-2"}))
	otherJob := startTLSTask(t, pki.Source("task-other-kv-1", identity.ID{Role: identity.Task, Job: "other", Task: "kv-1"}))

	for _, tc := range []struct {
		name string
		at   *tlsTask
		ok   bool
	}{
		{"the task itself", right, true},
		{"another task of the job", otherTask, false},
		{"a task of another job with the same name", otherJob, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := kvcache.NewClient(clerkAt(t, client, tc.at.addr), &http.Client{Timeout: 5 * time.Second})
			defer kv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			before := tc.at.served.Load()
			val, found, err := kv.Get(ctx, "some-key")
			reached := tc.at.served.Load() - before
			if tc.ok {
				if err != nil || !found || string(val) != tc.at.addr {
					t.Fatalf("Get from kv-1 at %s: %q, %v, %v; want the task's answer", tc.at.addr, val, found, err)
				}
				return
			}
			if err == nil || !errors.Is(err, kvcache.ErrNoOwner) {
				t.Errorf("Get with kv-1's address served by an impostor: %q, %v, %v; want the request refused", val, found, err)
			}
			if reached != 0 {
				t.Errorf("%d requests reached the impostor", reached)
			}
			t.Logf("refused: %v", err)
		})
	}

	// The task serves only callers whose certificate names a client or a
	// task of its job.
	for _, tc := range []struct {
		name string
		src  *tlsconfig.Source
		want int
	}{
		{"a client of the job", client, http.StatusOK},
		{"a task of the job", pki.Source("task-kv-3", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-3"}), http.StatusOK},
		{"a client of another job", pki.Source("client-other", identity.ID{Role: identity.Client, Job: "other"}), http.StatusForbidden},
		{"no certificate", nil, http.StatusForbidden},
	} {
		t.Run("caller is "+tc.name, func(t *testing.T) {
			cfg := client.ClientConfig(tlsconfig.WantTask("kv", "kv-1"))
			if tc.src != nil {
				cfg = tc.src.ClientConfig(tlsconfig.WantTask("kv", "kv-1"))
			} else {
				cfg.GetClientCertificate = nil
			}
			cfg.NextProtos = []string{"http/1.1"}
			tr := &http.Transport{TLSClientConfig: cfg}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + right.addr + "/kv/k")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("HTTP %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}

// BenchmarkClientGetTLS is a client's GET from a task, in cleartext and
// over mutual TLS where the client checks that the task's certificate
// names the task the assignment places there (Clerk.DialTaskTLS) and the
// task that the caller is a client of its job (RequireJobPeer). The
// connections are kept, so it is the request path, not the handshake.
func BenchmarkClientGetTLS(b *testing.B) {
	pki := tlstest.New(b, "kvcache-bench")
	for _, tls := range []bool{false, true} {
		b.Run(fmt.Sprintf("tls=%v", tls), func(b *testing.B) {
			var client, task *tlsconfig.Source
			if tls {
				client = pki.Source("client-kv", identity.ID{Role: identity.Client, Job: "kv"})
				task = pki.Source("task-kv-1", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-1"})
			}
			at := startTLSTask(b, task)
			kv := kvcache.NewClient(clerkAt(b, client, at.addr), &http.Client{Timeout: 5 * time.Second})
			defer kv.Close()
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, found, err := kv.Get(ctx, "some-key"); err != nil || !found {
						b.Errorf("get: %v %v", found, err)
						return
					}
				}
			})
		})
	}
}
