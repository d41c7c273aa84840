// Package storage keeps each job's assignment and sharding config durably,
// so that any Assigner can carry on the decisions of the one before it and a
// backup path can serve assignments while the Assigners are down.
//
// # Contract
//
// A Store holds, per job, a Record: the current assignment, the previous
// one, and the job's config. Writes of assignments are conditional, which is
// the optimistic concurrency of Slicer's assignment storage: an Assigner
// loads the record, computes the next assignment with a higher generation,
// and calls Commit with the generation it read (0 when nothing was stored).
// Commit succeeds only if that generation is still the stored one; if a
// concurrent Assigner committed first it fails with ErrConflict and changes
// nothing, and the loser loads the winner's assignment and tries again. Two
// Assigners that both believe they are in charge may thrash, but they never
// diverge: generations stored for a job only grow, and each one is
// committed exactly once.
//
// A failed write leaves the stored data exactly as it was. Stored data that
// cannot be decoded is reported as ErrCorrupt, never silently replaced:
// Commit refuses to overwrite a current or previous assignment it cannot
// read.
//
// The previous assignment is kept because the step between two
// assignments matters, not only the latest one: the slices unchanged
// between them stay usable while an assignment changes (the bridge over a
// transition), what moved in the last step can be measured and shown, and
// an operator looking at a bad rebalance can see what came before it. It
// costs one extra value per job.
//
// Every store has an incarnation: a random ID chosen when the store is
// created (the bbolt file, or the first key under an etcd prefix), written
// in the same transaction as the schema, and never changed; a store created
// before incarnations existed gets one the first time it is opened for
// writing. Deleting a store and creating it again gives a new incarnation,
// and generations start again at 1 there. Every assignment Load returns
// carries the store's incarnation (Assignment.Incarnation), and Commit
// stamps it on the assignment it stores and on the caller's. Generations
// compare only within one incarnation: whoever holds an assignment of
// another incarnation (a Distributor, a Clerk, a cache file) treats the
// store's as a reset, not as older.
//
// Config writes are unconditional, and replace even an unreadable config
// (that is how one is repaired); a job exists in the store once it has a
// config or an assignment. Records returned by Load are the caller's to
// modify.
//
// Delete removes a job's whole record (current, previous and config) in one
// write, so that no reader or committer ever sees part of it: a Commit
// conditional on a generation read before the Delete fails with
// ErrConflict (the stored generation is 0 again), and a Commit with
// prevGen 0 after it creates a new job, with no previous assignment and the
// default config. Like a config write it does not need to read what it
// replaces, so deleting a job is also how an unreadable one is removed.
//
// The store remembers the generation a job was deleted at, and the Commit
// that creates the job again adds it to the generation it stores (and
// tells the caller, as it does the incarnation). So the generations of one
// job name only grow, across deletions too: a committer that read the
// deleted job can never commit on top of the new one, however long it
// stalls, and a subscriber still holding an assignment of the deleted job
// takes the new job's for newer. That memory is one small value per
// deleted name, kept for the life of the store.
//
// # Implementations
//
// Bolt keeps everything in one bbolt file (see schema.go for the layout and
// encodings, and FormatVersion for upgrades). bbolt locks the file, so one
// slicerd process owns a data directory; others fail with ErrLocked.
// Package etcdstore keeps the same records in etcd, shared by processes on
// several machines, with Commit as one transaction on the revisions of the
// job's keys. Both are held to this contract by the suite in
// storage/storagetest, and stores outside this package reuse Bolt's value
// encodings and argument checks through codec.go.
//
// A store that can report commits as they happen implements Watcher (etcd
// does). Bolt does not: it could, since the file lock makes the one Bolt in
// a process the only writer, but that process's own Assigner is then the
// only committer, so there is no one to tell.
//
// Both implement CurrentLoader, a Load that leaves the previous assignment
// out: slicerd's roles need the current one only (a Backup serving it, an
// Assigner taking a job on or following one it does not lead), and for a
// job of a million slices the previous one is another 10 MB to read and
// decode.
package storage
