// Package h2server is the HTTP/2 server of golang.org/x/net/http2 at
// v0.62.0 (its pre-Go 1.27 implementation, server.go and what it uses),
// copied with its BSD licence (LICENSE) and changed in two ways for
// slicerd's assignment fan-out, where one node holds 100,000 or more
// long-lived response streams that each receive the same bytes a few
// times a minute:
//
//   - A stream's 4 KB response buffer is taken from a pool on the first
//     write and returned when a flush empties it, rather than held for
//     the stream's whole life (about 400 MB at 100,000 idle streams).
//
//   - A handler may detach its stream (Detach): the handler returns, its
//     goroutine and request state are released, and the stream stays
//     open. The stream's owner then writes immutable bytes to it without
//     waiting (Detached.Write and WriteBatch), on the connection's own
//     goroutine, under the same flow control, write scheduling and
//     connection limits as every other stream, and ends or resets it.
//     A detached stream costs a few hundred bytes and no goroutine, and a
//     write to the streams of a connection is one hand-off to it, not two
//     per stream.
//
// The client side (Transport) and the Go 1.27 wrapper of net/http's own
// server are left out. The internal packages httpcommon and httpsfv are
// copied from golang.org/x/net/internal alongside. Everything else is
// upstream's code; its changes, security fixes above all, must be carried
// over by hand: scripts/h2server-diff.sh shows this copy against the
// module cache's golang.org/x/net.
package h2server
