// Package watch is the subscription fan-out that the Assigner, the
// Distributor and the Backup share: how one job's newest assignment
// reaches every WatchAssignment stream a node serves.
//
// It owns:
//
//   - Latest, the newest assignment of one job and its waiting streams:
//     a slow stream skips to the newest generation instead of queueing,
//     the publisher never waits, and a change is sent to every stream by
//     a round of a few workers while the streams' handlers sleep, and
//     heartbeats to the streams that ask for them (api.HeartbeatHeader),
//     sent by each stream's handler every api.HeartbeatInterval
//     (latest.go);
//   - Message and Codec, the one protobuf encoding of a generation (and
//     of each delta) that every stream sends, and the budget of send
//     copies in flight (send.go);
//   - SendWatch, which resets a stream whose send waits longer than the
//     stream write timeout, and WithLimits, the HTTP middleware that gives
//     streaming handlers what they need to bound their sends (send.go);
//   - Limiter, the cap on streams open at once in one node (limit.go).
//
// It must not know where assignments come from (the Assigner's decisions,
// a Distributor's pull, the Backup's store poll) nor who may watch a job:
// the roles publish into a Latest and check the caller before they call
// Serve.
package watch
