package clerk_test

import (
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/subset"
)

// A server that accepts connections but never answers (a sick host, a
// listener of something else) ends each attempt only when the client's
// HTTP/2 pings give up, after longer than MaxBackoff. Such an attempt is
// not a healthy stream: the Clerk goes on to its next server in the same
// round, where it used to count the attempt as healthy and start every
// round again at the same server, the first of its subset, for ever.
func TestServerThatNeverAnswersIsNotHealthy(t *testing.T) {
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			conn, err := mute.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn) // read nothing, write nothing
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mute.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	real := newServer(t)
	real.Publish(clerktest.Uniform(job, 2, tasks, 5))

	addrs := []string{mute.Addr().String(), real.Addr()}
	sorted := slices.Sorted(slices.Values(addrs))
	// A client whose subset of one is the mute server.
	var frontend uint64
	for sorted[subset.Rocksteadier(frontend, 2, 2)[0]] != mute.Addr().String() {
		frontend++
	}
	cfg := testConfig(addrs...)
	cfg.SubsetSize, cfg.Frontend = 1, &frontend
	// Pings that give up after about 2 s, past MaxBackoff.
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: protocols,
		HTTP2: &http.HTTP2Config{SendPingTimeout: time.Second, PingTimeout: time.Second}}}
	t.Cleanup(hc.CloseIdleConnections)
	cfg.HTTPClient = hc
	cfg.MaxBackoff = 500 * time.Millisecond
	c := start(t, cfg)
	waitGen(t, c, 2)
}
