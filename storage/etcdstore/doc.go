// Package etcdstore is a storage.Store in etcd, for deployments where
// several slicerd nodes must share one assignment store: more than one
// Assigner (a standby ready to take over), or a Backup on another machine
// than the Assigner. It keeps the same contract as the bbolt store, and the
// shared suite in storage/storagetest holds both to it.
//
// Commit is one etcd transaction: it applies only if the job's current and
// previous keys still have the mod revisions Commit read (an absent key has
// revision 0), and it moves current to previous in the same transaction.
// So of two Assigners committing on the same generation, exactly one wins
// and the other gets storage.ErrConflict with the stored generation. Before
// writing, Commit decodes what it would move or replace (of an assignment
// stored in pieces, its head, and it counts the pieces), so an unreadable
// value is reported as storage.ErrCorrupt and left as it is.
//
// An assignment too large for one etcd request is stored in pieces under
// a head (chunks.go): the pieces are written first, and the transaction
// above switches to them, so the commit is still one atomic step.
//
// Load reads a job's keys with one range request, at one revision (and
// the pieces of a large assignment at that revision). An etcd
// that does not answer within the request timeout yields
// storage.ErrUnavailable, never storage.ErrConflict, so an Assigner retries
// its commit instead of rebasing on a state it never saw.
//
// Watch (storage.Watcher) follows commits with an etcd watch, so a Backup
// streams a new assignment as soon as it is committed, without polling.
//
// The store's incarnation (storage.Store.Incarnation) is the
// meta/incarnation key, written with the format version by the first
// writable Open under the prefix. Deleting the prefix (etcdctl del
// --prefix) recreates the store, with a new incarnation, at the next Open:
// restart every slicerd that uses it, since an open Store keeps the
// incarnation it read.
//
// Open connects over TLS when Options.TLS is set or an endpoint is
// https://, verifying etcd's certificate against the CA file and
// presenting a client certificate if given; tls.go follows those files as
// they are rotated on disk. With etcd's authentication on, the store logs
// in with Options.Username and Password, or as the client certificate's
// common name, and a writable store checks at Open that it may write under
// its prefix. Failures say what to fix: ErrTLS for a handshake etcd or the
// store refused, ErrAuth for refused credentials or permissions.
//
// The key layout is in schema.go; the values use the bbolt store's
// encodings.
package etcdstore
