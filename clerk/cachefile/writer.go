package cachefile

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/slicerd/slicerd/assign"
)

// Writer persists the newest of the assignments handed to Store, in the
// background. Store never blocks and never does I/O, so a Clerk can call it
// from its stream without slowing lookups or the stream; a burst of
// generations written faster than the disk keeps up costs one write of the
// newest. Run does the writing.
type Writer struct {
	path string
	log  *slog.Logger

	pending atomic.Pointer[assign.Assignment]
	kick    chan struct{}
	// written is the version on disk, or of the assignment read from it;
	// owned by Run (and set by NewWriter before Run starts).
	written assign.Version
	// failing is owned by Run: whether the last write failed, so a disk
	// that stays broken is reported once rather than per generation.
	failing bool
	// writes counts successful writes, for tests and metrics.
	writes atomic.Uint64
}

// NewWriter returns a Writer for the file at path that holds the
// assignment version onDisk already (the zero Version when it holds nothing
// usable), so it is not rewritten. log receives write failures; nil
// discards.
func NewWriter(path string, onDisk assign.Version, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Writer{path: path, log: log, kick: make(chan struct{}, 1), written: onDisk}
}

// Path is the file the Writer writes.
func (w *Writer) Path() string { return w.path }

// Store schedules a to be written. a must be valid and must not change
// afterwards. Only the newest assignment stored before the next write is
// written: the last one that supersedes the one before (a newer generation,
// or another store incarnation; assign.Version.Supersedes). It does not
// block.
func (w *Writer) Store(a *assign.Assignment) {
	for {
		old := w.pending.Load()
		if old != nil && !a.Version().Supersedes(old.Version()) {
			return
		}
		if w.pending.CompareAndSwap(old, a) {
			break
		}
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Writes is the number of files written so far.
func (w *Writer) Writes() uint64 { return w.writes.Load() }

// Run writes stored assignments until ctx ends, then writes the last one
// still pending and returns. Run may be called again after it returns, but
// not concurrently.
func (w *Writer) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			w.flush()
			return
		case <-w.kick:
			w.flush()
		}
	}
}

func (w *Writer) flush() {
	a := w.pending.Swap(nil)
	if a == nil || !a.Version().Supersedes(w.written) {
		return
	}
	if err := Write(w.path, a); err != nil {
		if !w.failing {
			w.log.Warn("cachefile: cannot write the assignment cache; routing is unaffected, but a restart while slicerd is unreachable will start from an older cache or none",
				"file", w.path, "generation", a.Generation, "err", err)
		} else {
			w.log.Debug("cachefile: write failed again", "file", w.path, "generation", a.Generation, "err", err)
		}
		w.failing = true
		// Keep a for a retry with the next generation or at shutdown,
		// unless something newer arrived meanwhile.
		w.pending.CompareAndSwap(nil, a)
		return
	}
	if w.failing {
		w.log.Info("cachefile: writing the assignment cache again", "file", w.path, "generation", a.Generation)
	}
	w.failing = false
	w.written = a.Version()
	w.writes.Add(1)
	w.log.Debug("cachefile: wrote assignment cache", "file", w.path, "generation", a.Generation)
}
