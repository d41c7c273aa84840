package api

import (
	"net/http"
	"strconv"
	"time"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
)

// Heartbeats keep a WatchAssignment stream's liveness visible while no
// generation goes out: HTTP/2 pings show that the server's process
// answers, not that it still sends on the stream, so a server stalled in
// the middle of a message, or whose stream stopped short of a newer
// generation, would hold a subscriber on a stale assignment for ever.
//
// The caller asks for them with the request header HeartbeatHeader set to
// "1". A server that sends them says so in the response header
// HeartbeatIntervalHeader (the interval in milliseconds), and then sends an
// empty WatchAssignmentResponse (neither assignment nor delta: a
// heartbeat) at once and after every interval in which it sent nothing
// else on the stream. A caller that was answered so may treat the stream
// as failed when no byte of it arrived for HeartbeatMisses intervals, and
// watch another server; a server that predates heartbeats sends no such
// header, and its streams are watched as before (no deadline). A server
// never sends a heartbeat to a caller that did not ask: a caller that
// predates them would take one for an invalid assignment.
const (
	HeartbeatHeader         = "Slicerd-Heartbeat"
	HeartbeatIntervalHeader = "Slicerd-Heartbeat-Interval"
	// HeartbeatInterval is the interval slicerd's servers announce.
	HeartbeatInterval = 15 * time.Second
	// HeartbeatMisses is how many intervals without a byte end a stream.
	HeartbeatMisses = 4
)

// AsksHeartbeats reports whether a WatchAssignment request's headers ask
// for heartbeats.
func AsksHeartbeats(h http.Header) bool { return h.Get(HeartbeatHeader) == "1" }

// AnnouncedHeartbeat returns the heartbeat interval a WatchAssignment
// response's headers announce, or 0 when they announce none (the server
// predates heartbeats) or an unreadable one.
func AnnouncedHeartbeat(h http.Header) time.Duration {
	ms, err := strconv.ParseInt(h.Get(HeartbeatIntervalHeader), 10, 64)
	if err != nil || ms <= 0 || ms > int64(time.Hour/time.Millisecond) {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// AnnounceHeartbeat sets the response header that announces heartbeats
// every interval.
func AnnounceHeartbeat(h http.Header, interval time.Duration) {
	h.Set(HeartbeatIntervalHeader, strconv.FormatInt(interval.Milliseconds(), 10))
}

// IsHeartbeat reports whether m is a heartbeat: it brings neither an
// assignment nor a delta.
func IsHeartbeat(m *slicerv1.WatchAssignmentResponse) bool {
	return m.GetAssignment() == nil && m.GetDelta() == nil
}
