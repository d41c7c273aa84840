package grpcroute

import (
	"context"

	"google.golang.org/grpc/metadata"

	"github.com/slicerd/slicerd/assign"
)

// DefaultKeyHeader is the request header a call's key is read from when
// its context carries none and Config.KeyHeader is empty.
const DefaultKeyHeader = "slicer-key"

type keyCtx struct{}

// routingKey is what WithKey attaches: the slice key, computed once.
type routingKey struct{ h assign.SliceKey }

// WithKey returns a copy of ctx whose calls on a slicer:/// channel go to a
// task holding key. The key is hashed here, once, so the pick itself does
// not hash.
func WithKey(ctx context.Context, key []byte) context.Context {
	return context.WithValue(ctx, keyCtx{}, &routingKey{assign.HashKey(key)})
}

// WithKeyString is WithKey for a key held as a string (its bytes are the
// key, as with the Clerk's string methods).
func WithKeyString(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, &routingKey{assign.HashString(key)})
}

// sliceKeyOf returns the slice key of the call with context ctx: from
// WithKey, else from the first value of header in the outgoing metadata
// (header is lower case; a "-bin" header's value is already the raw
// bytes). ok is false when the call has no key.
func sliceKeyOf(ctx context.Context, header string) (h assign.SliceKey, ok bool) {
	if k, ok := ctx.Value(keyCtx{}).(*routingKey); ok {
		return k.h, true
	}
	if header == "" {
		return 0, false
	}
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		return 0, false
	}
	vals := md[header]
	if len(vals) == 0 {
		return 0, false
	}
	return assign.HashString(vals[0]), true
}
