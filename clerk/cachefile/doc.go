// Package cachefile is the on-disk form of the assignment cache that Clerks
// and Slicelets keep when Config.CacheFile is set, so that a client that
// restarts while slicerd is unreachable routes at once on the last
// assignment it saw (Slicer §4.3, service-independent mode).
//
// A cache file is a 20-byte header followed by the job name and the
// protobuf encoding of the assignment (slicer.v1.Assignment, as produced by
// api.ToProto):
//
//	offset size  field
//	0      8     magic "SLCRASGN"
//	8      2     format version, big-endian (currently 2)
//	10     2     job name length, big-endian
//	12     4     assignment length, big-endian
//	16     4     CRC-32C (Castagnoli) of bytes [0,16) and of everything
//	             after the header
//	20     ...   job name, then the assignment
//
// Decode checks every field and validates the assignment (api.FromProto),
// so a torn, corrupt, truncated or foreign file is refused with an error
// naming what is wrong and is never routed on. A file written by a newer
// format version is refused with ErrNewerFormat rather than guessed at.
//
// Format history: version 2 is version 1 with the assignment's store
// incarnation (Assignment.incarnation) in the protobuf, which a reader must
// not drop: a client that restarts from the file must tell the assignment
// of a recreated store from an older one of the same store. Decode reads
// both; a version 1 file yields an assignment of unknown incarnation (""),
// which any server's assignment of a known incarnation replaces.
//
// Write replaces a file atomically and durably: it writes a temporary file
// in the same directory, syncs it, renames it over the old one and syncs
// the directory, so a crash leaves either the old file or the new one.
// Writer runs those writes in the background for a Clerk, coalescing
// bursts of generations to the newest.
package cachefile
