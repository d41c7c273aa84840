// Package api holds slicerd's public RPC contract: the protobuf sources under
// proto/, the generated Go code under gen/ (regenerate with
// scripts/genproto.sh), and conversions between the wire messages and the
// assign package's model.
package api
