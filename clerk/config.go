package clerk

import (
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/tlsconfig"
)

// Config configures a Clerk. Start from DefaultConfig.
type Config struct {
	// Job is the job whose assignment the Clerk follows.
	Job string
	// Addrs are Distributor RPC addresses (host:port), tried in turn.
	Addrs []string
	// BackupAddrs are Backup Distributor addresses, tried when no
	// Distributor answers.
	BackupAddrs []string
	// Resolver, when set, is called before every round of connection
	// attempts, and after ResolveNow while a stream is open, and replaces
	// Addrs and BackupAddrs, so the set of servers can follow membership.
	// It is called from Run's goroutines, never concurrently.
	Resolver func() (distributors, backups []string)
	// HTTPClient carries the RPCs. Nil means an HTTP/2 cleartext (h2c)
	// client owned by the Clerk.
	HTTPClient connect.HTTPClient
	// TLS, when set, calls slicerd over TLS: the Clerk presents TLS's
	// certificate (a client one for the job, spiffe://slicerd/client/JOB,
	// or a task's) and accepts only servers whose certificate names a
	// slicerd Distributor or Backup. With HTTPClient set too, HTTPClient
	// carries the calls and must be configured for TLS itself. Connect to
	// a task with the configuration Clerk.TaskTLS returns, which accepts
	// only the certificate of the task the assignment places there.
	TLS *tlsconfig.Source
	// MinBackoff and MaxBackoff bound the jittered wait between rounds of
	// connection attempts; it doubles after every round in which no server
	// answered. Zero means the default.
	MinBackoff, MaxBackoff time.Duration
	// BackupRecheck is how long the Clerk streams from a Backup, or from a
	// Distributor outside its subset, before it tries its preferred
	// Distributors again. Zero means the default.
	BackupRecheck time.Duration
	// Down, when set, lists Distributors known to be down, such as gossip
	// members that failed but did not leave; it is called with Resolver.
	// Subsetting numbers the Distributors over the live and the down ones
	// together and skips the down ones, so one Distributor failing moves
	// only the clients whose subset held it (each to the next Distributor
	// in its own order) instead of renumbering the Distributors after it
	// and moving many clients. Down addresses are never tried.
	Down func() []string
	// SubsetSize is how many Distributors the Clerk prefers (subsetting):
	// it streams from the SubsetSize Distributors subset.Rocksteadier
	// chooses for it, in Rocksteadier's order, and only when none of them
	// answers from the other Distributors, then from the Backups. That
	// spreads many clients evenly over the Distributors while each client
	// keeps to a few. DefaultConfig sets DefaultSubsetSize; 0 means no
	// subsetting: every Distributor is tried in turn, starting at a random
	// one.
	SubsetSize int
	// ID identifies this client to subsetting: its frontend number is
	// subset.FrontendIndex(ID), so a client that restarts with the same ID
	// prefers the same Distributors. Empty means hostname:pid (unique per
	// process, not stable across restarts). Ignored when Frontend is set.
	ID string
	// Frontend, when set, is this client's frontend number for subsetting,
	// used instead of a hash of ID. Set it when the clients are numbered
	// 0..M-1, which balances them over the Distributors better than a hash
	// does; a Slicelet sets its task number (subset.TaskNumber).
	Frontend *uint64
	// CacheFile, when set, is a file where the Clerk keeps the newest
	// assignment it accepted, so that after a restart it routes at once,
	// even while no slicerd server answers (see the package documentation).
	// Its directory must exist and be writable; New checks. Empty turns the
	// cache off. Each process needs its own file.
	CacheFile string
	// OnAssignment, when set, is called after every accepted assignment,
	// serially from Run's goroutine; prev is nil the first time. Both are
	// read-only. A slow callback delays the next update. An assignment New
	// loaded from CacheFile is reported, as (nil, cached), when Run first
	// starts.
	OnAssignment func(prev, next *assign.Assignment)
	// Logger receives state changes at info and retries at debug. Nil
	// discards.
	Logger *slog.Logger
	// Registerer, when set, receives the Clerk's Prometheus metrics,
	// labelled with the job: the held assignment's generation and age,
	// and lookups (see docs/operations.md, Metrics). A Clerk created
	// later for the same job replaces an earlier one's metrics. Nil
	// registers none, and lookups count nothing.
	Registerer prometheus.Registerer
}

// DefaultSubsetSize is the number of Distributors a Clerk started from
// DefaultConfig prefers.
const DefaultSubsetSize = 3

// DefaultConfig returns a configuration with working timers and
// subsetting; fill in Job and Addrs (or Resolver).
func DefaultConfig() Config {
	return Config{
		MinBackoff:    100 * time.Millisecond,
		MaxBackoff:    5 * time.Second,
		BackupRecheck: 30 * time.Second,
		SubsetSize:    DefaultSubsetSize,
	}
}

// withDefaults fills zero timers from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MinBackoff == 0 {
		c.MinBackoff = d.MinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = max(d.MaxBackoff, c.MinBackoff)
	}
	if c.BackupRecheck == 0 {
		c.BackupRecheck = d.BackupRecheck
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports what is wrong with c, if anything. Zero timers are
// valid: they mean the defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := assign.ValidateJobName(c.Job); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.Resolver == nil && len(c.Addrs) == 0 && len(c.BackupAddrs) == 0 {
		return fmt.Errorf("%w: job %q: no server address; set Addrs to the slicerd Distributors' RPC addresses or set a Resolver", ErrInvalidConfig, c.Job)
	}
	switch {
	case c.MinBackoff <= 0:
		return fmt.Errorf("%w: min backoff %v must be positive; start from DefaultConfig()", ErrInvalidConfig, c.MinBackoff)
	case c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("%w: max backoff %v is below min backoff %v", ErrInvalidConfig, c.MaxBackoff, c.MinBackoff)
	case c.BackupRecheck <= 0:
		return fmt.Errorf("%w: backup recheck %v must be positive; start from DefaultConfig()", ErrInvalidConfig, c.BackupRecheck)
	case c.SubsetSize < 0:
		return fmt.Errorf("%w: subset size %d is negative; use 0 for all Distributors or DefaultSubsetSize (%d)", ErrInvalidConfig, c.SubsetSize, DefaultSubsetSize)
	}
	return nil
}
