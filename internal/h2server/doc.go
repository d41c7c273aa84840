// Package h2server is the HTTP/2 server of golang.org/x/net/http2 at
// v0.62.0 (its implementation before Go 1.27, server.go and what it uses),
// copied with its BSD licence (LICENSE) and changed in two ways, for
// slicerd's assignment fan-out, where one node holds 100,000 or more
// long-lived response streams that each receive the same bytes a few
// times a minute, and may see them all open at once.
//
// First, a handler may detach its stream (Detach, detach.go).
// The handler then returns, its goroutine, request state and 4 KB
// response buffer are released, and the stream stays open. Its owner
// kicks it (Kick), and the connection's own goroutine pulls immutable
// bytes from it and writes them without copying, under the same flow
// control, write scheduling and stream limits as every other stream. A
// detached stream costs its stream state and no goroutine, and one
// hand-off to a connection reaches all of its streams, where a handler
// takes two per write.
//
// Second, the handlers starting at once over all connections may be
// bounded (Server.MaxStartingHandlers, startlimit.go): a request beyond
// the bound waits in its connection's queue, without a goroutine or a
// response buffer, until a starting handler queues its response
// headers, returns, waits for its request body, or says it waits for an
// event (Waiting); one that
// holds its place too long is parked. 100,000 streams opening at once
// then keep the scheduler's run queue near the bound instead of holding
// a goroutine for each.
//
// The changes to upstream's files are small and marked by the names they
// add: a detached field on stream and responseWriterState (writes after
// Detach are discarded, and the handler's return does not end the
// stream), a detachedLast field on writeData (its write completing pulls
// the next), and the calls into detach.go from closeStream and
// wroteFrame; a starts field on serverInternalState and serverConn,
// starting and startEpoch on stream, the queue's st field (its
// responseWriter is made when it starts), and the calls into
// startlimit.go from serve, writeFrame, scheduleHandler, startQueued
// (handlerDone's loop, split out), runHandler and requestBody.Read. The client side (Transport) and the Go 1.27 wrapper of
// net/http's own server are left out, and x/net's internal packages
// httpcommon and httpsfv are copied alongside. Upstream's later changes,
// security fixes above all, must be carried over by hand:
// scripts/h2server-diff.sh shows this copy against the golang.org/x/net
// that go.mod names.
package h2server
