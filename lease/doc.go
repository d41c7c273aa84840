// Package lease grants the leases that let slicerd offer strongly
// consistent jobs, where at most one task at a time believes it owns a key,
// and that fence Assigners, so that one Assigner at a time writes a job.
// It follows the Slicer paper's three locks per job (§4.5): a job lease,
// a guard lease and a bridge lease.
//
// # Contract
//
// The job lease is exclusive and taken by Assigners. Acquire grants it to
// one holder for a TTL, with an epoch above every epoch granted for the
// job before; the holder renews it (Renew) and gives it up (Release), or
// it expires. Acquire fails with ErrHeld while anyone holds it, the holder
// included. The store's fenced commit (storage.Fencer) checks the epoch in
// the same write as the generation: once another holder has been granted
// the lease, a commit under an older epoch fails with storage.ErrFenced,
// however long its Assigner was paused. The etcd manager's commits fail
// as soon as the lease expires or is released; the embedded one's only
// once another holder takes it, which is all fencing needs, since the
// holder that let its lease lapse stops by itself (see Time, below).
//
// The guard and the bridge are shared leases with a value. The holder of
// the job lease writes them (Set, Recall, Wait, all failing with ErrLost
// under a lease that is not the job's); Slicelets read them (Read, Unread).
// A Read succeeds only while the lease is open at exactly the value asked
// for, and lasts a TTL from when the manager received it; renewing is
// reading again. Recall closes the lease to readers: no Read succeeds
// until the next Set. Wait returns once no reader holds it, each having
// released it or let it expire. Set needs no reader at all (ErrBusy), and
// opens the lease at its new value. So a value replaces another only
// after every reader of the old one has stopped using it: a guard never
// has readers of two values.
//
// A reader is a task, by name; a read also records the instance of the
// reader that took it (the Slicelet process), since a restarted task's new
// process takes its name over while the old one, paused or cut off, may
// still hold a read. While a read of the guard or the bridge by one
// instance is live, a Read of either by another instance of the reader
// fails with ErrOtherProcess and changes nothing, and an Unread by another
// leaves it alone: two processes of one task never hold reads at once. An
// empty instance (a reader that predates them) is told apart from none.
//
// # Time
//
// A read lease lasts at least its TTL from when the manager received the
// request, and the manager grants nothing incompatible until it has
// expired by the manager's clock. A reader that counts the TTL from when
// it sent the request, less a margin for the two clocks' rates (see the
// slicelet package), therefore stops using the lease before anyone else
// can be granted what it covered; a reader paused past its deadline must
// not use it again until it reads again. Wait never returns earlier than
// that, and the contract suite checks it. Holders (Leader, the Slicelet)
// count their deadlines on internal/leaseclock, which, unlike Go's
// monotonic clock on Linux, counts the time their host spent suspended.
//
// # Implementations
//
// Embedded serves a single-node slicerd from its own memory and persists
// epochs and guard and bridge values in the bbolt file (storage.Bolt),
// whose fenced commit checks the epoch in the commit's transaction. It
// stores them outside its lock, so that tasks' reads and renewals never
// wait for a sync. While
// that node is down, nothing grants or renews leases: a strongly
// consistent job cannot change its assignment, and its Slicelets keep
// using their guard and bridge only until their leases run out, then stop
// serving the job's keys until the node is back. When it starts again it
// serves the persisted guard and bridge values, so readers renew at once;
// but it cannot know which readers the previous run granted, so it
// refuses to move a guard or bridge (Set, Wait) for MaxReadTTL, the
// longest read lease it grants. It keeps in memory only the jobs in use
// (a job lease held, a reader) and reads an idle job's state back from
// the file when the job is used again, so a deleted job costs it no
// memory once its lease is released; the persisted epoch outlives the
// deletion, so a job created again under the name continues above it.
//
// etcdlease keeps every lease in etcd, beside the store's records, with
// etcd leases and transactions, so that any slicerd node on the store
// serves them and they outlive every slicerd process. The job leases of one
// holder share one etcd lease, renewed with one keep-alive however many
// they are (RenewAll), and expire together. While etcd is down,
// the same holds as for the embedded manager's node.
//
// The suite in lease/leasetest holds both to this contract.
//
// # Who leads a job
//
// Leader keeps one Assigner's job leases. Proximity (Preference, over
// gossip's network coordinates, with hysteresis) decides which jobs it
// tries to take; the manager decides which it may write. Assigners whose
// coordinate is still settling after a restart are nobody's choice while
// a settled one is live, so members choosing from different copies of a
// fresh coordinate do not disagree. The Leader releases a job another
// live Assigner is now preferred for (not while it is itself leaving
// gossip: it keeps its leases until it stops), defers to a live holder of
// a job it would take until that holder lets the job go, adopts a job
// nobody holds when writes for it are forwarded to it, routes writes to
// the holder (Target), and renews what it holds with one RenewAll,
// treating a lease as lost from its local deadline on. With a manager that
// tells of job leases ending (ReleaseWatcher), a deferral waits for the
// holder's lease to end rather than asking the manager about it. The Assigner asks it one thing: Held, "do I
// hold job J, at which epoch?".
//
// Package guard is the protocol that moves a job's guard and bridge
// through its generations, the Assigner's side and the Slicelet's, as one
// state machine with a model test. Package leasecheck checks recorded histories of a strongly consistent
// job's requests for double owners and fencing tokens going back.
package lease
