package kvcache

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/slicerd/slicerd/clerk/grpcroute"
	kvcachev1 "github.com/slicerd/slicerd/examples/kvcache/gen/slicerd/kvcache/v1"
	"github.com/slicerd/slicerd/examples/kvcache/gen/slicerd/kvcache/v1/kvcachev1connect"
	"github.com/slicerd/slicerd/slicelet"
)

// kvService serves the cache's gRPC API (slicerd.kvcache.v1.KVService),
// the same operations as its HTTP API. Served with Connect, it answers
// gRPC, gRPC-Web and Connect clients alike.
type kvService struct{ s *Server }

// grpcHandler returns the path and handler of the gRPC API. Each call
// counts one unit of load on its key, as each HTTP request does.
func (s *Server) grpcHandler() (string, http.Handler) {
	key := func(r connect.AnyRequest) string {
		if m, ok := r.Any().(interface{ GetKey() string }); ok {
			return m.GetKey()
		}
		return ""
	}
	return kvcachev1connect.NewKVServiceHandler(kvService{s},
		connect.WithInterceptors(slicelet.Interceptor(s.sl, key)),
		connect.WithReadMaxBytes(MaxValueBytes+4096))
}

// rpcError is err of an operation on key as a Connect error: a key that
// is not the task's fails FAILED_PRECONDITION (the caller's assignment is
// behind; it retries once it has a newer one), a missing value NOT_FOUND,
// a failing backing store UNAVAILABLE.
func (k kvService) rpcError(key string, err error) error {
	switch {
	case errors.Is(err, errNotOwner):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("kvcache: key %q is not assigned to task %s; retry once the assignment is newer", key, k.s.sl.Task()))
	case errors.Is(err, errNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	default:
		return connect.NewError(connect.CodeUnavailable, err)
	}
}

func (k kvService) Get(ctx context.Context, req *connect.Request[kvcachev1.GetRequest]) (*connect.Response[kvcachev1.GetResponse], error) {
	key := req.Msg.GetKey()
	val, err := k.s.getValue(ctx, key)
	if err != nil {
		return nil, k.rpcError(key, err)
	}
	return connect.NewResponse(&kvcachev1.GetResponse{Value: val, Task: k.s.sl.Task()}), nil
}

func (k kvService) Put(ctx context.Context, req *connect.Request[kvcachev1.PutRequest]) (*connect.Response[kvcachev1.PutResponse], error) {
	key := req.Msg.GetKey()
	if err := k.s.putValue(ctx, key, req.Msg.GetValue()); err != nil {
		return nil, k.rpcError(key, err)
	}
	return connect.NewResponse(&kvcachev1.PutResponse{Task: k.s.sl.Task()}), nil
}

func (k kvService) Delete(ctx context.Context, req *connect.Request[kvcachev1.DeleteRequest]) (*connect.Response[kvcachev1.DeleteResponse], error) {
	key := req.Msg.GetKey()
	if err := k.s.deleteValue(ctx, key); err != nil {
		return nil, k.rpcError(key, err)
	}
	return connect.NewResponse(&kvcachev1.DeleteResponse{Task: k.s.sl.Task()}), nil
}

// GRPCClient is a client of the cache's gRPC API over a slicer:///JOB
// channel (package clerk/grpcroute): every call carries its key, and the
// channel sends it to the task that holds it. A call a task refuses
// because the key is not its own (the task's view is newer than the
// channel's) is retried a few times, backing off, while the channel
// catches up.
type GRPCClient struct {
	conn grpc.ClientConnInterface
}

// NewGRPCClient returns a client over conn, a channel to slicer:///JOB.
// It calls the methods by name (the procedures kvcachev1connect names),
// so gRPC-Go needs no generated stubs of its own.
func NewGRPCClient(conn grpc.ClientConnInterface) *GRPCClient {
	return &GRPCClient{conn: conn}
}

// invoke calls method with in and returns out.
func invoke[T any](ctx context.Context, conn grpc.ClientConnInterface, method string, in any) (*T, error) {
	out := new(T)
	if err := conn.Invoke(ctx, method, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// call runs one call for key, retrying refusals with the HTTP client's
// policy (maxAttempts, backing off from firstBackoff to maxBackoff).
func call[T any](ctx context.Context, key string, f func(context.Context) (T, error)) (T, error) {
	ctx = grpcroute.WithKeyString(ctx, key)
	wait := firstBackoff
	for attempt := 1; ; attempt++ {
		resp, err := f(ctx)
		if status.Code(err) != codes.FailedPrecondition {
			return resp, err
		}
		if attempt == maxAttempts {
			return resp, fmt.Errorf("%w: gave up after %d attempts (last: %w); slicerd may still be moving the key, retry later", ErrNoOwner, maxAttempts, err)
		}
		if perr := pause(ctx, wait); perr != nil {
			return resp, fmt.Errorf("kvcache: %q: %w (last attempt: %w)", key, perr, err)
		}
		wait = min(2*wait, maxBackoff)
	}
}

// Get returns key's value, whether it had one, and the task that served
// the call.
func (c *GRPCClient) Get(ctx context.Context, key string) (val []byte, found bool, task string, err error) {
	resp, err := call(ctx, key, func(ctx context.Context) (*kvcachev1.GetResponse, error) {
		return invoke[kvcachev1.GetResponse](ctx, c.conn, kvcachev1connect.KVServiceGetProcedure, &kvcachev1.GetRequest{Key: key})
	})
	if status.Code(err) == codes.NotFound {
		return nil, false, "", nil
	}
	if err != nil {
		return nil, false, "", err
	}
	return resp.GetValue(), true, resp.GetTask(), nil
}

// Put stores val under key and returns the task that stored it.
func (c *GRPCClient) Put(ctx context.Context, key string, val []byte) (task string, err error) {
	resp, err := call(ctx, key, func(ctx context.Context) (*kvcachev1.PutResponse, error) {
		return invoke[kvcachev1.PutResponse](ctx, c.conn, kvcachev1connect.KVServicePutProcedure, &kvcachev1.PutRequest{Key: key, Value: val})
	})
	return resp.GetTask(), err
}

// Delete removes key.
func (c *GRPCClient) Delete(ctx context.Context, key string) error {
	_, err := call(ctx, key, func(ctx context.Context) (*kvcachev1.DeleteResponse, error) {
		return invoke[kvcachev1.DeleteResponse](ctx, c.conn, kvcachev1connect.KVServiceDeleteProcedure, &kvcachev1.DeleteRequest{Key: key})
	})
	return err
}
