// Package rpc is the RPC edge the roles share: the sentinel errors that
// cross it and the one table that maps them, and the errors of storage,
// lease and assign, to Connect codes (ToConnect), with messages that tell
// the caller what to do; and the clients an agent calls other agents with
// (Peers), which trust a peer for what its certificate says.
//
// It must not hold any role's state.
package rpc
