// Package h2server is the HTTP/2 server of golang.org/x/net/http2 at
// v0.62.0 (its implementation before Go 1.27, server.go and what it uses),
// copied with its BSD licence (LICENSE) and changed in one way, for
// slicerd's assignment fan-out, where one node holds 100,000 or more
// long-lived response streams that each receive the same bytes a few
// times a minute: a handler may detach its stream (Detach, detach.go).
// The handler then returns, its goroutine, request state and 4 KB
// response buffer are released, and the stream stays open. Its owner
// kicks it (Kick), and the connection's own goroutine pulls immutable
// bytes from it and writes them without copying, under the same flow
// control, write scheduling and stream limits as every other stream. A
// detached stream costs its stream state and no goroutine, and one
// hand-off to a connection reaches all of its streams, where a handler
// takes two per write.
//
// The change to upstream's files is small and marked by the names it
// adds: a detached field on stream and responseWriterState (writes after
// Detach are discarded, and the handler's return does not end the
// stream), a detachedLast field on writeData (its write completing pulls
// the next), and the calls into detach.go from closeStream and
// wroteFrame. The client side (Transport) and the Go 1.27 wrapper of
// net/http's own server are left out, and x/net's internal packages
// httpcommon and httpsfv are copied alongside. Upstream's later changes,
// security fixes above all, must be carried over by hand:
// scripts/h2server-diff.sh shows this copy against the golang.org/x/net
// that go.mod names.
package h2server
