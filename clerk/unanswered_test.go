package clerk_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/subset"
)

// A server that accepts connections but never answers (a sick host, a
// listener of something else) ends each attempt only when the client's
// HTTP/2 pings give up, after longer than MaxBackoff. Such an attempt is
// not a healthy stream: the Clerk goes on to its next server in the same
// round, where it used to count the attempt as healthy and start every
// round again at the same server, the first of its subset, for ever.
func TestServerThatNeverAnswersIsNotHealthy(t *testing.T) {
	mute := testnet.Hanging(t, "127.0.0.1")
	real := newServer(t)
	real.Publish(clerktest.Uniform(job, 2, tasks, 5))

	addrs := []string{mute, real.Addr()}
	sorted := slices.Sorted(slices.Values(addrs))
	// A client whose subset of one is the mute server.
	var frontend uint64
	for sorted[subset.Rocksteadier(frontend, 2, 2)[0]] != mute {
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
