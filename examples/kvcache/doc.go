// Package kvcache is a small sharded in-memory key-value cache built on
// slicerd: a real example of a service whose tasks link the Slicelet and
// whose clients link the Clerk.
//
// Each task runs a Server. The Server answers only for keys its Slicelet
// says are assigned to it and answers 421 Misdirected Request for the rest,
// so a client routing on a stale assignment learns at once and retries.
// When slicerd moves a slice away, the Server drops the entries in it: this
// is a cache, and the new owner refills from the source of truth.
//
// A Client routes every request with a Clerk to the task that owns the key.
//
//	GET    /kv/{key}   200 with the value, 404 when absent
//	PUT    /kv/{key}   204; the body (at most MaxValueBytes) is the value
//	DELETE /kv/{key}   204
//	GET    /stats      {"task": ..., "keys": ..., "generation": ...}
//
// Keys travel path-escaped (url.PathEscape), so any byte string is a key.
// cmd/kvserver and cmd/kvclient are runnable processes built from these
// parts; see README.md.
package kvcache
