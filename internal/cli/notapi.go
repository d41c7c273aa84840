package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"github.com/urfave/cli/v2"
)

// notAPIShapes are what an HTTP/2 call says when the address answers but
// not in HTTP/2, as slicerd's API always does: an HTTP/1-only server (the
// web UI, the metrics port, an example's kvserver) answers the connection
// preface with an HTTP/1.1 error, which the client reads as an oversized
// frame; a server of another protocol closes the connection.
var notAPIShapes = []string{
	"frame too large",
	"looked like an HTTP/1.1 header",
	"http2: client conn could not be established",
	"malformed HTTP response",
	"server gave HTTP response to HTTPS client",
}

// whereTheAPIIs ends the messages about an --addr that is not slicerd's API.
const whereTheAPIIs = "slicerd's API is on its --rpc-addr, 127.0.0.1:7070 by default"

// notSlicerdAPI returns a message saying that --addr is not slicerd's API,
// if err, from a call to it, shows that it is not: the connection did not
// speak HTTP/2 the way slicerd does (see notAPIShapes), or it did but
// serves no slicerd service at all, as an etcd client port, another gRPC
// server, or an HTTP/2 server that answers 404 for everything.
func notSlicerdAPI(c *cli.Context, err error) (string, bool) {
	addr := c.String("addr")
	notAPI := fmt.Sprintf("%s answered but is not a slicerd API address (did you point --addr at the UI, metrics or an etcd port? %s)", addr, whereTheAPIIs)
	msg := err.Error()
	for _, shape := range notAPIShapes {
		if strings.Contains(msg, shape) {
			return notAPI, true
		}
	}
	// A connection closed before any answer is what a server of another
	// protocol does, such as gossip's TCP listener, but also a slicerd
	// that stops, or refuses a connection over --max-connections.
	if strings.HasSuffix(msg, "unexpected EOF") || strings.HasSuffix(msg, "broken pipe") || strings.HasSuffix(msg, "connection reset by peer") {
		return fmt.Sprintf("%s closed the connection without answering: either it is not a slicerd API address (did you point --addr "+
			"at a gossip, UI, metrics or etcd port? %s), or slicerd there stopped or is over its --max-connections", addr, whereTheAPIIs), true
	}
	if connect.CodeOf(err) == connect.CodeUnimplemented && !servesSlicerServices(c) {
		return notAPI, true
	}
	return "", false
}

// servesSlicerServices reports whether --addr lists a slicer.v1 service
// through server reflection, which every slicerd node serves whatever its
// roles. Unless reflection says otherwise (the server does not serve it,
// or lists no slicer.v1 service) it reports true.
func servesSlicerServices(c *cli.Context) bool {
	hc, url, opts, err := rpcClient(c)
	if err != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
	defer cancel()
	stream := grpcreflect.NewClient(hc, url, opts...).NewStream(ctx)
	defer stream.Close()
	names, err := stream.ListServices()
	if err != nil {
		var ce *connect.Error
		return !errors.As(err, &ce) || ce.Code() != connect.CodeUnimplemented && ce.Code() != connect.CodeNotFound
	}
	for _, n := range names {
		if strings.HasPrefix(string(n), "slicer.v1.") {
			return true
		}
	}
	return false
}
