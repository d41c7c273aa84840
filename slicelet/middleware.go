package slicelet

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
)

// HTTPMiddleware counts one unit of load per request on the key that key
// extracts from it, then calls next. This is the request-rate load signal
// (paper §4.4) with no code in the handlers; report a custom cost with
// ReportLoad instead when requests differ widely in cost.
func HTTPMiddleware(s *Slicelet, key func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = s.ReportLoadString(key(r), 1) // a cost of 1 is always valid
		next.ServeHTTP(w, r)
	})
}

// Interceptor returns a Connect handler interceptor that counts one unit
// of load per unary request and, on streaming calls, one per message the
// handler receives, on the key that key extracts. A long-lived stream thus
// weighs as much as the messages it carries rather than as one request.
// For a streaming call the request passed to key carries the call's
// request headers and no message (Connect does not expose the stream's
// messages before the handler reads them), so streaming procedures should
// carry their routing key in a header; key is called once per stream, at
// its first message. Client-side calls pass through untouched.
func Interceptor(s *Slicelet, key func(connect.AnyRequest) string) connect.Interceptor {
	return &interceptor{s: s, key: key}
}

type interceptor struct {
	s   *Slicelet
	key func(connect.AnyRequest) string
}

func (i *interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient {
			_ = i.s.ReportLoadString(i.key(req), 1)
		}
		return next(ctx, req)
	}
}

func (i *interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, &countingConn{StreamingHandlerConn: conn, i: i})
	}
}

// countingConn counts one unit of load per message received on a stream.
// A handler receives from one goroutine, so key needs no lock.
type countingConn struct {
	connect.StreamingHandlerConn
	i       *interceptor
	key     string
	haveKey bool
}

func (c *countingConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	if !c.haveKey {
		req := connect.NewRequest[struct{}](nil)
		for k, v := range c.RequestHeader() {
			req.Header()[k] = v
		}
		c.key, c.haveKey = c.i.key(req), true
	}
	_ = c.i.s.ReportLoadString(c.key, 1)
	return nil
}
