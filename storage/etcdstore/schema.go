package etcdstore

import (
	"fmt"
	"slices"
	"strings"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
)

// The key layout under a store's prefix, in one place:
//
//	<prefix>meta/format_version     uint64, 8 bytes big-endian
//	<prefix>meta/incarnation        the store's incarnation ID (format 2 on)
//	<prefix>jobs/<job>/current      assignment, assign's binary codec, or
//	                                from format 3 the head of one stored in
//	                                pieces (chunks.go)
//	<prefix>jobs/<job>/previous     assignment current replaced, the same
//	<prefix>chunks/<job>/<set>/<i>  piece <i> (8 hex digits) of an
//	                                assignment too large for one value;
//	                                <set> (16 hex digits) is named by a head
//	<prefix>jobs/<job>/config       assign.Config as JSON
//	<prefix>deleted/<job>           the generation the job was deleted at,
//	                                uint64, 8 bytes big-endian
//	<prefix>leases/<job>/job        the job lease: its holder's name, put
//	                                with the holder's etcd lease; its create
//	                                revision is the lease's epoch
//	<prefix>leases/<job>/...        the guard and bridge leases and their
//	                                readers, laid out by package lease
//	<prefix>history/<job>/<gen>     the decision that committed generation
//	                                <gen> (16 hex digits), storage.HistoryEntry
//	                                as JSON; the newest storage.HistoryLimit
//	                                kept, deleted with the job
//
// The values are encoded exactly as in the bbolt file (storage.Encode*).
// Job names cannot contain '/', so a job's keys are exactly those under
// <prefix>jobs/<job>/. A job exists once one of its keys does.
//
// A deleted job leaves its generation under deleted/, outside jobs/, so
// that the job created again continues above it, as in the bbolt file
// (storage/schema.go); a binary that does not know the key ignores it.
//
// The meta keys are created together, by one transaction, by the first
// writable Open under the prefix. Format 1 had no incarnation: a writable
// Open of a format 1 store adds it and moves the store to format 2 in one
// transaction, as Bolt does for its file (storage/schema.go). Format 3 adds
// the chunked assignments: a writable Open moves a store to it by writing
// the version, so that a binary that cannot read a head refuses the store
// at Open rather than finding a job corrupt.

// DefaultPrefix is the key namespace used when Options.Prefix is empty.
const DefaultPrefix = "/slicerd/"

// FormatVersion is the layout version this binary writes and the newest it
// reads. Bump it when the layout or an encoding changes incompatibly.
const FormatVersion uint64 = 3

const (
	leafCurrent  = "current"
	leafPrevious = "previous"
	leafConfig   = "config"
)

// keys builds the keys of one prefix.
type keys struct{ prefix string }

func (k keys) metaDir() string            { return k.prefix + "meta/" }
func (k keys) meta() string               { return k.metaDir() + "format_version" }
func (k keys) incarnation() string        { return k.metaDir() + "incarnation" }
func (k keys) jobs() string               { return k.prefix + "jobs/" }
func (k keys) job(job string) string      { return k.jobs() + job + "/" }
func (k keys) current(job string) string  { return k.job(job) + leafCurrent }
func (k keys) previous(job string) string { return k.job(job) + leafPrevious }
func (k keys) config(job string) string   { return k.job(job) + leafConfig }
func (k keys) deletedDir() string         { return k.prefix + "deleted/" }
func (k keys) deleted(job string) string  { return k.deletedDir() + job }
func (k keys) leases(job string) string   { return k.allLeases() + job + "/" }
func (k keys) allLeases() string          { return k.prefix + "leases/" }
func (k keys) jobLease(job string) string { return k.leases(job) + "job" }
func (k keys) history(job string) string  { return k.prefix + "history/" + job + "/" }
func (k keys) historyAt(job string, gen uint64) string {
	return k.history(job) + storage.HistoryKeyHex(gen)
}

// jobOf returns the job a key under jobs() belongs to, and its leaf.
func (k keys) jobOf(key []byte) (job, leaf string, err error) {
	rest, ok := strings.CutPrefix(string(key), k.jobs())
	if !ok {
		return "", "", fmt.Errorf("key %q is not under %q", key, k.jobs())
	}
	job, leaf, ok = strings.Cut(rest, "/")
	if !ok || assign.ValidateJobName(job) != nil {
		return "", "", fmt.Errorf("key %q under %q does not name a job", key, k.jobs())
	}
	return job, leaf, nil
}

// normalizePrefix applies the default and ends the prefix with '/', so
// that one prefix is never a prefix of another's keys.
func normalizePrefix(p string) (string, error) {
	if p == "" {
		return DefaultPrefix, nil
	}
	if strings.ContainsAny(p, "\x00\n") || strings.TrimSpace(p) != p {
		return "", fmt.Errorf("prefix %q contains a NUL, a newline or surrounding spaces", p)
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p, nil
}

// sortedJobs returns the distinct names in names, sorted.
func sortedJobs(names []string) []string {
	slices.Sort(names)
	return slices.Compact(names)
}
