package storage

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/slicerd/slicerd/assign"
)

// A job's decision history: one HistoryEntry per assignment an Assigner
// committed, written in the commit's own transaction (so the history never
// names a generation that was not stored, nor misses one an Assigner
// committed), newest HistoryLimit kept. It is what `slicerd job history`
// prints and what `slicerd job why` searches.

// HistoryLimit is how many decisions a store keeps per job: a commit that
// records a decision drops the ones more than HistoryLimit generations
// older. At MaxHistoryMoves moves of at most a few hundred bytes each, a
// job's history stays under about 10 MB.
const HistoryLimit = 256

// MaxHistoryMoves bounds the moves one HistoryEntry lists; the rest are
// counted in MovesOmitted (and in Phases).
const MaxHistoryMoves = 128

// maxHistoryPhases bounds the phases one HistoryEntry counts moves of.
const maxHistoryPhases = 64

// maxHistoryText bounds each text field of a HistoryEntry and its moves.
const maxHistoryText = 1024

// Causes of a decision, as recorded in HistoryEntry.Cause.
const (
	CauseInitial    = "initial"           // the job's first assignment
	CauseTaskFailed = "task-failed"       // gossip declared a task failed
	CauseTaskLeft   = "task-left"         // a task left gossip, or stopped serving the job
	CauseTaskJoined = "task-joined"       // a task joined the job
	CauseTaskMoved  = "task-moved"        // a task came back at another address
	CauseOperator   = "operator"          // a drain, cordon, pin or configuration change
	CauseLoad       = "load"              // a periodic load-balancing decision
	CauseTakeover   = "takeover"          // an Assigner took the job over
	CauseHandoff    = "make-before-break" // the second step of a make-before-break decision
	CauseRenumber   = "renumber"          // a task held a newer generation: the store went back
)

// HistoryEntry records one committed decision of a job.
type HistoryEntry struct {
	// Generation is the assignment the decision committed.
	Generation uint64 `json:"generation"`
	// Time is when it was committed, by the Assigner's clock.
	Time time.Time `json:"time"`
	// Cause is one of the Cause constants; Detail says more ("task kv-3
	// failed").
	Cause  string `json:"cause"`
	Detail string `json:"detail,omitempty"`
	// Assigner is the gossip name of the Assigner that decided.
	Assigner string `json:"assigner,omitempty"`
	// Algorithm decided (assign.Algorithm's name); empty for steps that
	// run no algorithm (a takeover, a make-before-break flip).
	Algorithm string `json:"algorithm,omitempty"`
	// Churn is the fraction of the key space that gained a task.
	Churn float64 `json:"churn"`
	// ImbalanceBefore and ImbalanceAfter are max/mean task utilisation
	// under the load measured at the time, of the replaced assignment and
	// of the new one.
	ImbalanceBefore float64 `json:"imbalance_before"`
	ImbalanceAfter  float64 `json:"imbalance_after"`
	// Load is the job's total measured load the decision saw.
	Load float64 `json:"load"`
	// Phases counts every move, splits and merges included, by the phase
	// that took it, in the order the phases first ran.
	Phases []PhaseMoves `json:"phases,omitempty"`
	// Moves lists the moves that changed which tasks serve keys
	// (reassignments and replicas added or removed) in the order taken,
	// at most MaxHistoryMoves; MovesOmitted counts those left out.
	Moves        []HistoryMove `json:"moves,omitempty"`
	MovesOmitted int           `json:"moves_omitted,omitempty"`
}

// PhaseMoves counts the moves of one phase of a decision.
type PhaseMoves struct {
	Phase string `json:"phase"`
	Moves int    `json:"moves"`
}

// HistoryMove is an assign.Move as the history keeps it.
type HistoryMove struct {
	Phase  string          `json:"phase,omitempty"`
	Kind   string          `json:"kind"`
	Start  assign.SliceKey `json:"start"`
	End    assign.SliceKey `json:"end"`
	From   string          `json:"from,omitempty"`
	To     string          `json:"to,omitempty"`
	Reason string          `json:"reason,omitempty"`
}

// Covers reports whether the move's range holds the slice key k.
func (m HistoryMove) Covers(k assign.SliceKey) bool { return m.Start <= k && k < m.End }

// NewHistoryEntry summarises a decision's moves for the history: counts by
// phase, and the ownership moves up to MaxHistoryMoves.
func NewHistoryEntry(d assign.Decision) HistoryEntry {
	e := HistoryEntry{Churn: d.Churn}
	for _, m := range d.Moves {
		i := slices.IndexFunc(e.Phases, func(p PhaseMoves) bool { return p.Phase == m.Phase })
		if i < 0 && len(e.Phases) == maxHistoryPhases {
			i = len(e.Phases) - 1 // phases past the bound count with the last
		}
		if i < 0 {
			i = len(e.Phases)
			e.Phases = append(e.Phases, PhaseMoves{Phase: clip(m.Phase)})
		}
		e.Phases[i].Moves++
		if m.Kind == assign.Split || m.Kind == assign.Merge {
			continue
		}
		if len(e.Moves) == MaxHistoryMoves {
			e.MovesOmitted++
			continue
		}
		e.Moves = append(e.Moves, HistoryMove{Phase: m.Phase, Kind: m.Kind.String(), Start: m.Start, End: m.End,
			From: m.From, To: m.To, Reason: clip(m.Reason)})
	}
	return e
}

// clip shortens s to maxHistoryText bytes.
func clip(s string) string {
	if len(s) > maxHistoryText {
		return s[:maxHistoryText]
	}
	return s
}

// Historian is implemented by a Store that keeps each job's decision
// history.
type Historian interface {
	// CommitRecorded is CommitFenced that also records e, with its
	// Generation set to the one stored, in the same write, and drops
	// the job's entries HistoryLimit or more generations older.
	CommitRecorded(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment, e HistoryEntry) error
	// History returns the job's newest recorded decisions, newest first,
	// at most limit of them (HistoryLimit when limit is 0 or above it).
	// A job without history returns none and no error. Entries that do
	// not decode are left out: the history is a record, and one bad
	// value must not hide the rest.
	History(ctx context.Context, job string, limit int) ([]HistoryEntry, error)
}

// EncodeHistoryEntry encodes a history value, checking its bounds.
func EncodeHistoryEntry(e HistoryEntry) ([]byte, error) {
	if err := checkHistoryEntry(e); err != nil {
		return nil, err
	}
	return json.Marshal(e)
}

// DecodeHistoryEntry decodes a history value and checks its bounds.
func DecodeHistoryEntry(b []byte) (HistoryEntry, error) {
	var e HistoryEntry
	if err := json.Unmarshal(b, &e); err != nil {
		return HistoryEntry{}, fmt.Errorf("the history entry does not decode: %w", err)
	}
	if err := checkHistoryEntry(e); err != nil {
		return HistoryEntry{}, fmt.Errorf("the history entry is invalid: %w", err)
	}
	return e, nil
}

func checkHistoryEntry(e HistoryEntry) error {
	if len(e.Moves) > MaxHistoryMoves {
		return fmt.Errorf("%d moves, more than %d", len(e.Moves), MaxHistoryMoves)
	}
	for _, f := range []float64{e.Churn, e.ImbalanceBefore, e.ImbalanceAfter, e.Load} {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("a figure is %v", f)
		}
	}
	texts := []string{e.Cause, e.Detail, e.Assigner, e.Algorithm}
	for _, m := range e.Moves {
		texts = append(texts, m.Phase, m.Kind, m.From, m.To, m.Reason)
		if m.Start >= m.End || m.End > assign.KeySpaceEnd {
			return fmt.Errorf("a move covers [%#x, %#x), not a range of the key space", m.Start, m.End)
		}
	}
	for _, s := range texts {
		if len(s) > maxHistoryText {
			return fmt.Errorf("a text field is %d bytes, more than %d", len(s), maxHistoryText)
		}
	}
	if len(e.Phases) > maxHistoryPhases {
		return fmt.Errorf("%d phases, more than %d", len(e.Phases), maxHistoryPhases)
	}
	if e.MovesOmitted < 0 || e.MovesOmitted > math.MaxUint32 {
		return fmt.Errorf("moves_omitted %d is out of range", e.MovesOmitted)
	}
	for _, p := range e.Phases {
		if p.Moves < 0 || p.Moves > math.MaxUint32 || len(p.Phase) > maxHistoryText {
			return fmt.Errorf("phase %q counts %d moves", clip(p.Phase), p.Moves)
		}
	}
	return nil
}

// historyKey is the key of a generation's history entry: big-endian, so
// keys sort by generation.
func historyKey(gen uint64) []byte { return binary.BigEndian.AppendUint64(nil, gen) }

// HistoryKeyHex is the etcd key suffix of a generation's history entry:
// 16 hex digits, so keys sort by generation.
func HistoryKeyHex(gen uint64) string { return fmt.Sprintf("%016x", gen) }

// HistoryFloor is the lowest generation a job's history keeps once gen
// is recorded.
func HistoryFloor(gen uint64) uint64 {
	if gen < HistoryLimit {
		return 0
	}
	return gen - HistoryLimit + 1
}
