package assign

import (
	"fmt"
	"math"
	"reflect"
	"slices"
)

// MaxRedundancyLimit bounds how many tasks may serve one slice.
const MaxRedundancyLimit = 64

// MaxSlicesPerTaskLimit bounds the slice-count targets: more slices than
// this per task only make assignments large without balancing any better.
const MaxSlicesPerTaskLimit = 10000

// MaxSlicesLimit bounds Config.MaxSlices: the most slices an encoded
// assignment may hold.
const MaxSlicesLimit = maxEncodedSlices

// Defaults of the weighted-move constants, from the Slicer paper (§4.4.1).
const (
	DefaultMinSlicesPerTask = 50
	DefaultMaxSlicesPerTask = 150
	DefaultMergeChurn       = 0.01
	DefaultMoveChurn        = 0.09
	DefaultMergeLoadFactor  = 1.0
	DefaultSplitLoadFactor  = 2.0
)

// Consistency is what a job's tasks may believe about owning a key.
type Consistency string

const (
	// Affinity (the default, also written "") routes each key to tasks
	// that likely hold its state; during a change two tasks may both
	// believe they own a key for a moment, and a task may answer a key it
	// does not own (the Clerk retries elsewhere).
	Affinity Consistency = "affinity"
	// Strong gives each key at most one owner at any instant: a Slicelet
	// uses an assignment only under the job's guard and bridge leases
	// (package lease), and hands out fencing tokens. It needs max
	// redundancy 1.
	Strong Consistency = "strong"
)

// ParseConsistency parses "affinity", "strong" or "" (affinity).
func ParseConsistency(s string) (Consistency, error) {
	switch Consistency(s) {
	case "", Affinity:
		return Affinity, nil
	case Strong:
		return Strong, nil
	}
	return "", fmt.Errorf("%w: consistency %q is neither %q nor %q", ErrInvalidConfig, s, Affinity, Strong)
}

// Config is a job's sharding configuration.
//
// Every field but the redundancies may be zero in a stored configuration,
// meaning its default: configurations stored before a field existed keep
// working and pick up the default.
type Config struct {
	// MinRedundancy is the number of tasks every slice is assigned to, when
	// that many tasks are live.
	MinRedundancy int `json:"min_redundancy"`
	// MaxRedundancy caps the tasks a hot slice may be replicated to.
	MaxRedundancy int `json:"max_redundancy"`

	// MinSlicesPerTask: weighted-move merges cold slices only while the job
	// has more than this many slices per live task.
	MinSlicesPerTask int `json:"min_slices_per_task,omitempty"`
	// MaxSlicesPerTask: weighted-move splits hot slices only while the job
	// has fewer than this many slices per live task.
	MaxSlicesPerTask int `json:"max_slices_per_task,omitempty"`
	// MaxSlices caps the job's slices whatever its task count: splits stop
	// there, and merges may go below MinSlicesPerTask per task to reach it.
	// Zero: no cap beyond MaxSlicesPerTask per task.
	MaxSlices int `json:"max_slices,omitempty"`
	// MergeChurn is the fraction of the key space merging may move in one
	// decision.
	MergeChurn float64 `json:"merge_churn,omitempty"`
	// MoveChurn is the fraction of the key space the greedy moves may move
	// in one decision.
	MoveChurn float64 `json:"move_churn,omitempty"`
	// MergeLoadFactor: two adjacent slices merge only if their combined load
	// is below this times the mean slice load.
	MergeLoadFactor float64 `json:"merge_load_factor,omitempty"`
	// SplitLoadFactor: a slice splits when its load is at least this times
	// the mean slice load.
	SplitLoadFactor float64 `json:"split_load_factor,omitempty"`
	// SuppressBelow, in load units, skips merging, moving and splitting
	// while the hottest task's load is below it: an idle job is not worth
	// churning. Zero never suppresses.
	SuppressBelow float64 `json:"suppress_below,omitempty"`
	// Consistency is Affinity (also "", the default) or Strong.
	Consistency Consistency `json:"consistency,omitempty"`
	// Algorithm names the sharding algorithm of the job's load-driven
	// decisions (AlgorithmNames); "" is AlgorithmWeightedMove.
	Algorithm string `json:"algorithm,omitempty"`
	// Frozen stops load-driven decisions for the job; membership and
	// configuration changes are still decided.
	Frozen bool `json:"frozen,omitempty"`
	// Drained and Cordoned name the job's tasks an operator drained (their
	// slices move to other tasks; Task.Draining) or cordoned (they get no
	// new slices; Task.Cordoned), sorted, unique, at most
	// MaxControlledTasks each. A name needs no live task: the mark applies
	// whenever a task of that name is live.
	Drained  []string `json:"drained,omitempty"`
	Cordoned []string `json:"cordoned,omitempty"`
	// Victim is how phase 4 of weighted-move weighs the cost of a move
	// off the hottest task, in the spirit of CacheLib's rebalancing
	// strategies: VictimGainPerKey ("" too, the default) or
	// VictimGainPerByte.
	Victim string `json:"victim,omitempty"`
	// HandoffDeadlineMS turns on make-before-break moves: a decision that
	// gives keys to new tasks while the tasks losing them are still live
	// first adds the gaining tasks beside the losing ones (both serve, the
	// gaining ones fetch the keys' state), and drops the losing tasks this
	// many milliseconds later. 0 (the default): keys move at once. At most
	// MaxHandoffDeadlineMS; not for strongly consistent jobs, whose keys
	// have at most one owner.
	HandoffDeadlineMS int `json:"handoff_deadline_ms,omitempty"`
	// Pins are an operator's pins (slicerd job pin): the keys of each
	// pin's range are served by its task whenever that task is live and
	// not draining, whatever load or membership would decide. Sorted by
	// Start, not overlapping, at most MaxPins.
	Pins []Pin `json:"pins,omitempty"`
}

// Pin says the keys [Start, End) are served by Task, for Reason.
type Pin struct {
	Start  SliceKey `json:"start"`
	End    SliceKey `json:"end"`
	Task   string   `json:"task"`
	Reason string   `json:"reason,omitempty"`
}

// Pin bounds.
const (
	MaxPins         = 1024
	MaxPinReasonLen = 256
)

// Victim policies: what a phase-4 move costs, against the load it takes
// off the hottest task.
const (
	// VictimGainPerKey: the keys it moves (the paper's churn), so the
	// fewest keys move for the balance gained.
	VictimGainPerKey = "gain-per-key"
	// VictimGainPerByte: the state it moves (the slices' reported
	// LoadEntry.Bytes), so the least state travels: slices without state
	// move first. For jobs whose tasks hand state over; without bytes in
	// the load it is VictimGainPerKey.
	VictimGainPerByte = "gain-per-byte"
)

// MaxHandoffDeadlineMS bounds Config.HandoffDeadlineMS: ten minutes.
const MaxHandoffDeadlineMS = 600_000

// MaxControlledTasks bounds Config.Drained and Config.Cordoned.
const MaxControlledTasks = 1024

// Equal reports whether c and d are the same configuration, field by
// field (a zero field and its default differ).
func (c Config) Equal(d Config) bool {
	cs, ds := c, d
	cs.Drained, cs.Cordoned, ds.Drained, ds.Cordoned = nil, nil, nil, nil
	cs.Pins, ds.Pins = nil, nil
	return reflect.DeepEqual(cs, ds) && slices.Equal(c.Drained, d.Drained) && slices.Equal(c.Cordoned, d.Cordoned) &&
		slices.Equal(c.Pins, d.Pins)
}

// Controls applies the configuration's Drained and Cordoned to live, a
// copy of which it returns with those tasks marked.
func (c Config) Controls(live []Task) []Task {
	if len(c.Drained) == 0 && len(c.Cordoned) == 0 {
		return live
	}
	out := slices.Clone(live)
	for i := range out {
		if _, ok := slices.BinarySearch(c.Drained, out[i].Name); ok {
			out[i].Draining = true
		}
		if _, ok := slices.BinarySearch(c.Cordoned, out[i].Name); ok {
			out[i].Cordoned = true
		}
	}
	return out
}

// IsStrong reports whether the job is configured for strong consistency.
func (c Config) IsStrong() bool { return c.Consistency == Strong }

// DefaultConfig returns the configuration a job gets when nobody set one:
// every key on exactly one task, and the paper's weighted-move constants.
func DefaultConfig() Config {
	return Config{MinRedundancy: 1, MaxRedundancy: 1}.WithDefaults()
}

// WithDefaults returns c with every zero tuning field set to its default.
func (c Config) WithDefaults() Config {
	if c.MinSlicesPerTask == 0 {
		c.MinSlicesPerTask = DefaultMinSlicesPerTask
	}
	if c.MaxSlicesPerTask == 0 {
		c.MaxSlicesPerTask = max(DefaultMaxSlicesPerTask, c.MinSlicesPerTask)
	}
	if c.MergeChurn == 0 {
		c.MergeChurn = DefaultMergeChurn
	}
	if c.MoveChurn == 0 {
		c.MoveChurn = DefaultMoveChurn
	}
	if c.MergeLoadFactor == 0 {
		c.MergeLoadFactor = DefaultMergeLoadFactor
	}
	if c.SplitLoadFactor == 0 {
		c.SplitLoadFactor = DefaultSplitLoadFactor
	}
	return c
}

// Validate checks 1 <= MinRedundancy <= MaxRedundancy <= MaxRedundancyLimit
// and that every tuning field is zero (default) or in range.
func (c Config) Validate() error {
	switch {
	case c.MinRedundancy < 1:
		return fmt.Errorf("%w: min redundancy is %d; it must be at least 1", ErrInvalidConfig, c.MinRedundancy)
	case c.MaxRedundancy < c.MinRedundancy:
		return fmt.Errorf("%w: max redundancy %d is below min redundancy %d", ErrInvalidConfig, c.MaxRedundancy, c.MinRedundancy)
	case c.MaxRedundancy > MaxRedundancyLimit:
		return fmt.Errorf("%w: max redundancy %d is above the limit of %d", ErrInvalidConfig, c.MaxRedundancy, MaxRedundancyLimit)
	case c.MinSlicesPerTask < 0 || c.MinSlicesPerTask > MaxSlicesPerTaskLimit:
		return fmt.Errorf("%w: min slices per task %d is outside [0, %d]; use 0 for the default %d", ErrInvalidConfig, c.MinSlicesPerTask, MaxSlicesPerTaskLimit, DefaultMinSlicesPerTask)
	case c.MaxSlicesPerTask < 0 || c.MaxSlicesPerTask > MaxSlicesPerTaskLimit:
		return fmt.Errorf("%w: max slices per task %d is outside [0, %d]; use 0 for the default %d", ErrInvalidConfig, c.MaxSlicesPerTask, MaxSlicesPerTaskLimit, DefaultMaxSlicesPerTask)
	case c.MaxSlices < 0 || c.MaxSlices > MaxSlicesLimit:
		return fmt.Errorf("%w: max slices %d is outside [0, %d]; use 0 for no cap", ErrInvalidConfig, c.MaxSlices, MaxSlicesLimit)
	}
	if _, err := ParseConsistency(string(c.Consistency)); err != nil {
		return err
	}
	if c.Algorithm != "" {
		if _, err := AlgorithmByName(c.Algorithm); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	if c.IsStrong() && c.MaxRedundancy > 1 {
		return fmt.Errorf("%w: a strongly consistent job gives each key at most one task, so its max redundancy must be 1, not %d; use consistency affinity for replicated keys",
			ErrInvalidConfig, c.MaxRedundancy)
	}
	if d := c.WithDefaults(); d.MaxSlicesPerTask < d.MinSlicesPerTask {
		return fmt.Errorf("%w: max slices per task %d is below min slices per task %d", ErrInvalidConfig, d.MaxSlicesPerTask, d.MinSlicesPerTask)
	}
	for _, f := range []struct {
		name     string
		v, limit float64
	}{
		{"merge churn", c.MergeChurn, 1},
		{"move churn", c.MoveChurn, 1},
		{"merge load factor", c.MergeLoadFactor, 1e6},
		{"split load factor", c.SplitLoadFactor, 1e6},
		{"suppress below", c.SuppressBelow, MaxLoad},
	} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > f.limit {
			return fmt.Errorf("%w: %s is %g; it must be in [0, %g], 0 meaning the default", ErrInvalidConfig, f.name, f.v, f.limit)
		}
	}
	if c.SplitLoadFactor != 0 && c.SplitLoadFactor <= 1 {
		return fmt.Errorf("%w: split load factor %g must be above 1, or a split slice would split again at once", ErrInvalidConfig, c.SplitLoadFactor)
	}
	for _, l := range []struct {
		name  string
		tasks []string
	}{{"drained", c.Drained}, {"cordoned", c.Cordoned}} {
		if len(l.tasks) > MaxControlledTasks {
			return fmt.Errorf("%w: %d %s tasks; at most %d may be", ErrInvalidConfig, len(l.tasks), l.name, MaxControlledTasks)
		}
		for i, name := range l.tasks {
			if err := ValidateTaskName(name); err != nil {
				return fmt.Errorf("%w: %s task %d: %w", ErrInvalidConfig, l.name, i, err)
			}
			if i > 0 && l.tasks[i-1] >= name {
				return fmt.Errorf("%w: %s tasks are not sorted and unique at %q", ErrInvalidConfig, l.name, name)
			}
		}
	}
	switch c.Victim {
	case "", VictimGainPerKey, VictimGainPerByte:
	default:
		return fmt.Errorf("%w: victim policy %q; use %q or %q", ErrInvalidConfig, c.Victim, VictimGainPerKey, VictimGainPerByte)
	}
	switch {
	case c.HandoffDeadlineMS < 0 || c.HandoffDeadlineMS > MaxHandoffDeadlineMS:
		return fmt.Errorf("%w: handoff deadline %d ms is outside [0, %d]; 0 moves keys at once", ErrInvalidConfig, c.HandoffDeadlineMS, MaxHandoffDeadlineMS)
	case c.HandoffDeadlineMS > 0 && c.IsStrong():
		return fmt.Errorf("%w: make-before-break moves serve a key from two tasks for a while, and a strongly consistent job gives each key at most one; set the handoff deadline to 0", ErrInvalidConfig)
	}
	if len(c.Pins) > MaxPins {
		return fmt.Errorf("%w: %d pins; at most %d may be", ErrInvalidConfig, len(c.Pins), MaxPins)
	}
	for i, p := range c.Pins {
		switch {
		case p.Start >= p.End || p.End > KeySpaceEnd:
			return fmt.Errorf("%w: pin %d [%#x, %#x) is empty or past the key space end", ErrInvalidConfig, i, p.Start, p.End)
		case i > 0 && p.Start < c.Pins[i-1].End:
			return fmt.Errorf("%w: pin %d [%#x, %#x) overlaps or precedes pin %d; pins are sorted and do not overlap", ErrInvalidConfig, i, p.Start, p.End, i-1)
		case len(p.Reason) > MaxPinReasonLen:
			return fmt.Errorf("%w: pin %d has a %d-byte reason; at most %d", ErrInvalidConfig, i, len(p.Reason), MaxPinReasonLen)
		}
		if err := ValidateTaskName(p.Task); err != nil {
			return fmt.Errorf("%w: pin %d: %w", ErrInvalidConfig, i, err)
		}
	}
	return nil
}

// sliceCeiling is the most slices splitting may leave a job of n tasks
// with: MaxSlicesPerTask per task, and at most MaxSlices when set.
func (c Config) sliceCeiling(n int) int {
	if c.MaxSlices > 0 {
		return min(c.MaxSlicesPerTask*n, c.MaxSlices)
	}
	return c.MaxSlicesPerTask * n
}

// sliceFloor is the fewest slices merging leaves a job of n tasks with:
// MinSlicesPerTask per task, and at most MaxSlices when set.
func (c Config) sliceFloor(n int) int {
	if c.MaxSlices > 0 {
		return min(c.MinSlicesPerTask*n, c.MaxSlices)
	}
	return c.MinSlicesPerTask * n
}
