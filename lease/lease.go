package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/slicerd/slicerd/assign"
)

// Kind names one of a job's two shared leases.
type Kind uint8

const (
	// Guard is the lease whose value is the generation the job's
	// Slicelets may use (Value.From == Value.To).
	Guard Kind = 1
	// Bridge is the lease over a transition From → To: its readers may use
	// the keys they are assigned in both generations while the guard moves.
	Bridge Kind = 2
)

func (k Kind) String() string {
	switch k {
	case Guard:
		return "guard"
	case Bridge:
		return "bridge"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is Guard or Bridge.
func (k Kind) Valid() bool { return k == Guard || k == Bridge }

// Job is a held job lease: the right to write the job (its assignments,
// its guard and its bridge) until the lease expires or is released.
type Job struct {
	Job    string
	Holder string
	// Epoch is the lease's number: it grows with every grant of the job's
	// lease, whoever the holder, and never repeats. Every commit and every
	// shared-lease write of the holder is conditional on it.
	Epoch uint64
	// TTL is the lease's lifetime from the request that granted or last
	// renewed it, as the manager granted it (it may round the requested
	// one up).
	TTL time.Duration
	// ID is the implementation's handle on the lease (etcd's lease ID);
	// callers pass it back unchanged.
	ID int64
}

// Renewal is the outcome of renewing one job lease (Manager.RenewAll):
// the renewed lease, or the error Renew would have returned.
type Renewal struct {
	Job Job
	Err error
}

// Value is what a guard or bridge lease says. A guard's readers may use the
// assignment of generation From (== To). A bridge's readers may use, of
// the keys assigned to them at From, those also assigned to them at To.
type Value struct {
	From, To uint64
}

// GuardValue is the guard's value for generation gen.
func GuardValue(gen uint64) Value { return Value{From: gen, To: gen} }

func (v Value) String() string {
	if v.From == v.To {
		return fmt.Sprintf("generation %d", v.From)
	}
	return fmt.Sprintf("generations %d→%d", v.From, v.To)
}

// State is a guard or bridge lease as the manager holds it.
type State struct {
	// Set reports whether the lease was ever written; Value and Recalled
	// are zero until it is.
	Set   bool
	Value Value
	// Recalled: the lease is closed to readers. No reader acquires or
	// renews it; those that hold it keep it until they release it or it
	// expires, and the holder of the job lease may write a new value once
	// none is left.
	Recalled bool
}

// Read is a held read lease on a job's guard or bridge.
type Read struct {
	Job    string
	Kind   Kind
	Reader string
	Value  Value
	// TTL is how long the lease lasts from the moment the request that
	// granted it was received, at the least. A reader that counts it from
	// when it sent the request, less a margin for the rates of the two
	// clocks, stops using the lease before the manager could hand the
	// guard to a new value.
	TTL time.Duration
}

// Reader is one holder of a read lease, as Readers lists them.
type Reader struct {
	Name  string
	Value Value
}

// Manager grants the leases of strongly consistent jobs: each job's
// exclusive job lease, taken by Assigners, and its guard and bridge leases,
// written by the job lease's holder and read by the job's Slicelets. Every
// implementation keeps the contract in the package documentation, and the
// suite in lease/leasetest holds it to it.
type Manager interface {
	// Acquire grants job's lease to holder for about ttl, with an epoch
	// above every earlier one. It fails with ErrHeld while anyone holds
	// the lease, holder included: a lease is only renewed with Renew.
	Acquire(ctx context.Context, job, holder string, ttl time.Duration) (Job, error)
	// Renew extends a held lease by its TTL from now, keeping its epoch; it
	// fails with ErrLost once the lease expired or was released.
	Renew(ctx context.Context, l Job) (Job, error)
	// RenewAll is Renew for each of ls in one call, returning the outcome
	// of each in order. A manager renews the leases of one holder with as
	// few requests as it can (etcd: one keep-alive for all of them), so a
	// holder renews every lease it holds with one call.
	RenewAll(ctx context.Context, ls []Job) []Renewal
	// Release gives the lease up at once; releasing a lost lease is not an
	// error.
	Release(ctx context.Context, l Job) error
	// Holder returns job's lease as its holder has it; ErrNotHeld when
	// nobody holds it.
	Holder(ctx context.Context, job string) (Job, error)

	// State returns job's guard or bridge lease.
	State(ctx context.Context, job string, kind Kind) (State, error)
	// Set writes v to job's guard or bridge, open to readers. It needs
	// the job lease l, and no reader holding the lease: it fails with
	// ErrLost when l is not the job's lease, ErrBusy while readers remain
	// (Recall and Wait first).
	Set(ctx context.Context, l Job, kind Kind, v Value) error
	// Recall closes job's guard or bridge to readers: none acquires or
	// renews it from now on. It needs the job lease (ErrLost). Recalling a
	// lease never set, or already recalled, does nothing.
	Recall(ctx context.Context, l Job, kind Kind) error
	// Wait returns once no reader holds job's guard or bridge: every one
	// released it or let it expire. It needs the job lease (ErrLost).
	// Without a Recall first, readers may keep renewing and it may wait
	// until ctx ends.
	Wait(ctx context.Context, l Job, kind Kind) error
	// Readers lists the readers holding job's guard or bridge, sorted by
	// name.
	Readers(ctx context.Context, job string, kind Kind) ([]Reader, error)

	// Read acquires or renews reader's read lease on job's guard or
	// bridge at v for about ttl. It fails with ErrRecalled unless the
	// lease is open at exactly v.
	//
	// instance names the process of the reader (a Slicelet's random ID,
	// new each time the task starts). A reader name is a task's, which a
	// new process takes over when the task restarts; while a read by one
	// instance is live (not released and not expired), a Read by another
	// fails with ErrOtherProcess and changes nothing, so that no two
	// processes of a task hold the lease at once, and the older one's read
	// ends no later than it was granted. A read that is renewed keeps its
	// instance. An empty instance (a reader that predates it) is not told
	// apart from any other: such a Read takes or renews the read whoever
	// holds it, and a read it took is taken by the next Read of any
	// instance.
	Read(ctx context.Context, job string, kind Kind, reader, instance string, v Value, ttl time.Duration) (Read, error)
	// Unread releases reader's read lease at v at once; a read at another
	// value is left alone, so that a release that arrives late cannot end
	// a read taken since. The zero Value releases the read whatever its
	// value. A non-empty instance releases only a read of that instance
	// (or of none): a late release by a task's previous process leaves
	// alone the read its new process took. Releasing one not held is not
	// an error.
	Unread(ctx context.Context, job string, kind Kind, reader, instance string, v Value) error

	// Close releases the manager. Leases it granted are not released: they
	// expire, or are released through another manager.
	Close() error
}

// ReleaseWatcher is a Manager that tells of job leases as they end:
// released, expired or deleted. A Leader on one waits for such an event
// before it looks again at a job another Assigner holds, instead of asking
// the manager about each such job every preference recheck.
type ReleaseWatcher interface {
	// WatchReleases calls watching once the watch is in place, then ended
	// with the job of each job lease that ends, until ctx ends or the
	// watch fails. It returns nil once ctx ended, or the error that ended
	// the watch: events may have been missed since, and the caller checks
	// again what it waited for.
	WatchReleases(ctx context.Context, watching func(), ended func(job string)) error
}

// MaxNameLen bounds a holder or reader name, as it bounds the keys an
// implementation stores.
const MaxNameLen = 256

// CheckJob validates a job name.
func CheckJob(op, job string) error {
	if err := assign.ValidateJobName(job); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, op, err)
	}
	return nil
}

// CheckName validates a holder or reader name: 1 to MaxNameLen bytes of
// printable ASCII without '/' (names become key elements).
func CheckName(op, what, name string) error {
	if name == "" {
		return fmt.Errorf("%w: %s: the %s name is empty", ErrInvalid, op, what)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %s: the %s name is %d bytes long, over the %d-byte limit", ErrInvalid, op, what, len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == '/' {
			return fmt.Errorf("%w: %s: the %s name %q has byte %q at %d; use printable ASCII without '/' or spaces",
				ErrInvalid, op, what, name, c, i)
		}
	}
	return nil
}

// MaxInstanceLen bounds a reader's instance ID.
const MaxInstanceLen = 64

// CheckInstance validates a reader's instance ID: empty, or up to
// MaxInstanceLen bytes of printable ASCII.
func CheckInstance(op, instance string) error {
	if len(instance) > MaxInstanceLen {
		return fmt.Errorf("%w: %s: the instance ID is %d bytes long, over the %d-byte limit", ErrInvalid, op, len(instance), MaxInstanceLen)
	}
	for i := 0; i < len(instance); i++ {
		if c := instance[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("%w: %s: the instance ID %q has byte %q at %d; use printable ASCII without spaces", ErrInvalid, op, instance, c, i)
		}
	}
	return nil
}

// OtherInstance reports whether a call by instance comes from another
// process of the reader than held, the instance that holds its read: both
// are named, and differ. A reader that names no instance is told apart
// from none (Manager.Read).
func OtherInstance(held, instance string) bool {
	return held != "" && instance != "" && held != instance
}

// CheckTTL validates a requested lease lifetime.
func CheckTTL(op string, ttl time.Duration) error {
	if ttl <= 0 || ttl > MaxTTL {
		return fmt.Errorf("%w: %s: lease TTL %v must be above 0 and at most %v", ErrInvalid, op, ttl, MaxTTL)
	}
	return nil
}

// MaxTTL bounds every lease's lifetime: a reader that dies holding a lease
// holds up a recall for at most this long.
const MaxTTL = time.Minute

// CheckArgs validates the job and kind of a shared-lease call.
func CheckArgs(op, job string, kind Kind) error {
	if err := CheckJob(op, job); err != nil {
		return err
	}
	if !kind.Valid() {
		return fmt.Errorf("%w: %s job %q: lease kind %d is neither guard (1) nor bridge (2)", ErrInvalid, op, job, uint8(kind))
	}
	return nil
}

// CheckValue validates a shared lease's value: a guard's From and To are
// one generation above 0; a bridge goes from a generation above 0 to a
// higher one.
func CheckValue(op string, kind Kind, v Value) error {
	switch {
	case v.From == 0:
		return fmt.Errorf("%w: %s: %s value %v starts at generation 0", ErrInvalid, op, kind, v)
	case kind == Guard && v.From != v.To:
		return fmt.Errorf("%w: %s: a guard value names one generation, not %v", ErrInvalid, op, v)
	case kind == Bridge && v.To <= v.From:
		return fmt.Errorf("%w: %s: a bridge goes to a later generation, not %v", ErrInvalid, op, v)
	}
	return nil
}
