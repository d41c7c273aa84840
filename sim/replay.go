package sim

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/slicerd/slicerd/assign"
)

// DefaultJob is the job name a replay uses when Config.Job is empty.
const DefaultJob = "sim"

// Config says how to replay a trace.
type Config struct {
	// Algorithm takes one decision per window. Required.
	Algorithm assign.Algorithm
	// Job is the job name passed to the algorithm (default DefaultJob).
	Job string
	// Assign is the job's sharding configuration; the zero value means
	// assign.DefaultConfig().
	Assign assign.Config
	// Capacity, if not nil, sets the relative capacity of the tasks it
	// names, over what the trace gives; tasks it does not name keep the
	// trace's capacity (1 without one).
	Capacity map[string]float64
	// Memory, if not nil, sets the memory limit in bytes of the tasks it
	// names, over what the trace gives; the name "*" sets it for every
	// task it does not name. 0 is no limit.
	Memory map[string]float64
	// Now reads the clock that times each decision (default time.Now).
	// Tests inject a fixed clock to make the output reproducible.
	Now func() time.Time
	// AsAssigner decides and commits each window as a live Assigner does:
	// a window whose live tasks differ from the held assignment's gets the
	// membership decision (assign.Membership: a departed task's keys and a
	// joiner's share move, nothing else), committed; a window with the
	// same tasks gets the algorithm's, committed only when it lowers the
	// held imbalance by assign.SignificantGain, the trace's loads read as
	// request counts (the hottest task's load is its count of requests).
	// Without it every window gets the algorithm's decision, committed
	// whenever it changes anything.
	AsAssigner bool
}

func (c Config) withDefaults() (Config, error) {
	if c.Algorithm == nil {
		return c, fmt.Errorf("%w: no algorithm; pick one with assign.AlgorithmByName", ErrInvalidConfig)
	}
	if c.Job == "" {
		c.Job = DefaultJob
	}
	if err := assign.ValidateJobName(c.Job); err != nil {
		return c, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.Assign.Equal(assign.Config{}) {
		c.Assign = assign.DefaultConfig()
	}
	if err := c.Assign.Validate(); err != nil {
		return c, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	for name, v := range c.Capacity {
		if err := assign.ValidateTaskName(name); err != nil {
			return c, fmt.Errorf("%w: capacity: %w", ErrInvalidConfig, err)
		}
		if err := assign.ValidateCapacity(v); err != nil {
			return c, fmt.Errorf("%w: capacity of %q: %w", ErrInvalidConfig, name, err)
		}
	}
	for name, v := range c.Memory {
		if name != "*" {
			if err := assign.ValidateTaskName(name); err != nil {
				return c, fmt.Errorf("%w: memory: %w", ErrInvalidConfig, err)
			}
		}
		if err := assign.ValidateMemoryLimit(v); err != nil {
			return c, fmt.Errorf("%w: memory limit of %q: %w", ErrInvalidConfig, name, err)
		}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// SliceOut is one slice of an assignment as a replay prints it: bounds in
// hex ("0x..."), since slice keys exceed what JSON numbers carry exactly.
type SliceOut struct {
	Start string   `json:"start"`
	End   string   `json:"end"`
	Tasks []string `json:"tasks"`
}

// WindowResult is the decision taken for one window and how good it is.
type WindowResult struct {
	Window     uint64 `json:"window"`
	Generation uint64 `json:"generation"`
	// Imbalance is the most utilised task's load per unit of capacity
	// over the job's (assign.ImbalanceWith): max over mean load when
	// every task has capacity 1.
	Imbalance float64 `json:"imbalance"`
	// HeldImbalance is the imbalance of the assignment in force during
	// the window, the one decided from the window before, under this
	// window's load: what the tasks carried before this window's
	// decision. Absent for the first window. A decision that only fits
	// the window it saw shows here, one window later.
	HeldImbalance float64 `json:"held_imbalance,omitempty"`
	// Bound is a lower bound of Imbalance for this window's load: 1, or
	// the hottest key split over MaxRedundancy tasks of the largest
	// capacity, whichever is higher. No assignment does better.
	Bound float64 `json:"bound"`
	Churn float64 `json:"churn"`
	// KeyChurn is the fraction of the window's application keys (those
	// with a load line) whose task set gained a task: churn counted in
	// keys rather than in hashed width. Once hot keys sit in slices of
	// their own, moving one costs almost no width but one whole key.
	KeyChurn  float64 `json:"key_churn"`
	Slices    int     `json:"slices"`
	ComputeMS float64 `json:"compute_ms"`
	// MemoryUse is the largest share of its memory limit any task with
	// one holds (1: exactly at it), from the keys' bytes; absent when no
	// task has a limit.
	MemoryUse float64 `json:"memory_use,omitempty"`
	// BytesMoved is the state the decision moves (assign.BytesMoved);
	// absent when the trace gives no bytes.
	BytesMoved float64 `json:"bytes_moved,omitempty"`
	// Tasks are the assignment's tasks: the ones Imbalance averages over.
	Tasks      []string   `json:"tasks"`
	Assignment []SliceOut `json:"assignment"`
}

// Summary aggregates a replay. MeanChurn averages over the decisions that
// had a previous assignment (every window but the first); the others
// average over every window.
type Summary struct {
	Summary       bool    `json:"summary"`
	Algorithm     string  `json:"algorithm"`
	Windows       int     `json:"windows"`
	MeanImbalance float64 `json:"mean_imbalance"`
	MaxImbalance  float64 `json:"max_imbalance"`
	// MeanHeldImbalance and MaxHeldImbalance are over the windows with a
	// HeldImbalance (every window but the first), MeanBound over all.
	MeanHeldImbalance float64 `json:"mean_held_imbalance"`
	MaxHeldImbalance  float64 `json:"max_held_imbalance"`
	MeanBound         float64 `json:"mean_bound"`
	// Changes counts the windows after the first whose decision changed
	// the assignment: the commits an Assigner would make.
	Changes int `json:"changes"`
	// Gated counts the load decisions Config.AsAssigner kept from being
	// committed.
	Gated             int     `json:"gated,omitempty"`
	MeanChurn         float64 `json:"mean_churn"`
	MeanKeyChurn      float64 `json:"mean_key_churn"`
	MeanSlicesPerTask float64 `json:"mean_slices_per_task"`
	// MaxMemoryUse is the largest MemoryUse of any window, and
	// WindowsOverLimit the windows in which some task held more than its
	// limit; both absent when no task has a limit.
	MaxMemoryUse     float64 `json:"max_memory_use,omitempty"`
	WindowsOverLimit int     `json:"windows_over_limit,omitempty"`
	// TotalBytesMoved adds up the windows' BytesMoved.
	TotalBytesMoved float64 `json:"total_bytes_moved,omitempty"`
}

// Simulator takes one decision per window, keeping the assignment between
// windows. It is not safe for concurrent use.
type Simulator struct {
	cfg  Config
	prev *assign.Assignment

	windows                  int
	sumImb, maxImb, sumChurn float64
	sumHeld, maxHeld         float64
	changes                  int
	sumBound                 float64
	sumKeyChurn              float64
	sumSlicesPerTask         float64
	maxMem, bytesMoved       float64
	overLimit                int
	gated                    int // decisions not committed by Config.AsAssigner's gate
	// bytes is the state each application key holds, from the trace's
	// "bytes" so far: state stays until a line gives the key new bytes.
	bytes map[string]float64
}

// NewSimulator returns a Simulator with no assignment yet.
func NewSimulator(cfg Config) (*Simulator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Simulator{cfg: cfg}, nil
}

// Assignment returns the latest assignment (nil before the first Step).
func (s *Simulator) Assignment() *assign.Assignment { return s.prev }

// Step decides the assignment for window w from the previous one, w's live
// tasks and w's load, and measures it against that same load. When the
// algorithm changes nothing the previous assignment, and its generation,
// stay in force, as they would in an assigner.
func (s *Simulator) Step(w *Window) (WindowResult, error) {
	load, err := w.Load()
	if err != nil {
		return WindowResult{}, err
	}
	lines := load
	load = s.withBytes(w, load)
	live := w.LiveTasks()
	for i := range live {
		if c, ok := s.cfg.Capacity[live[i].Name]; ok {
			live[i].Capacity = c
		}
		if m, ok := s.cfg.Memory[live[i].Name]; ok {
			live[i].MemoryLimit = m
		} else if m, ok := s.cfg.Memory["*"]; ok {
			live[i].MemoryLimit = m
		}
	}
	var held float64
	if s.prev != nil {
		held = assign.ImbalanceWith(s.prev, load, live)
	}
	decide, name := s.cfg.Algorithm.Decide, s.cfg.Algorithm.Name()
	// As the Assigner decides (roles/assigner's decide): a job whose
	// assignment does not reflect its live tasks gets the membership
	// decision, unless no task of it is live and every key moves anyway.
	byName := slices.SortedFunc(slices.Values(live), func(a, b assign.Task) int { return cmp.Compare(a.Name, b.Name) })
	membership := s.cfg.AsAssigner && !s.prev.Settled(byName) && s.prev.KeepsTask(live)
	if membership {
		decide, name = assign.Membership, "membership"
	}
	start := s.cfg.Now()
	next, _, err := decide(s.cfg.Job, s.prev, live, load, s.cfg.Assign)
	elapsed := s.cfg.Now().Sub(start)
	if err != nil {
		return WindowResult{}, fmt.Errorf("%w: %s: window %d: %w", ErrAlgorithm, name, w.Number, err)
	}
	if s.prev != nil && next != nil && assign.Equal(s.prev, next) {
		next = s.prev
	}
	if s.cfg.AsAssigner && s.prev != nil && next != s.prev && !membership {
		var e assign.Evidence
		if i, _ := assign.Hottest(s.prev, load, live); i >= 0 {
			e = assign.Evidence{Events: assign.TaskLoads(s.prev, load)[i], Share: assign.CapacityShare(s.prev, live, i), Tasks: len(s.prev.Tasks)}
		}
		if !assign.SignificantGain(held, assign.ImbalanceWith(next, load, live), e) {
			next = s.prev
			s.gated++
		}
	}
	if err := next.Validate(); err != nil {
		return WindowResult{}, fmt.Errorf("%w: %s: window %d: returned an invalid assignment: %w", ErrAlgorithm, name, w.Number, err)
	}
	var churn, keyChurn, bytesMoved float64
	if s.prev != nil {
		churn = assign.Churn(s.prev, next)
		keyChurn = keysGained(s.prev, next, lines)
		bytesMoved = assign.BytesMoved(s.prev, next, load)
	}
	res := WindowResult{
		Window:        w.Number,
		Generation:    next.Generation,
		Imbalance:     assign.ImbalanceWith(next, load, live),
		HeldImbalance: held,
		Bound:         imbalanceBound(load, live, s.cfg.Assign.MaxRedundancy),
		Churn:         churn,
		KeyChurn:      keyChurn,
		Slices:        len(next.Slices),
		ComputeMS:     float64(elapsed.Microseconds()) / 1000,
		Tasks:         make([]string, len(next.Tasks)),
		Assignment:    make([]SliceOut, len(next.Slices)),
	}
	for i, t := range next.Tasks {
		res.Tasks[i] = t.Name
	}
	res.MemoryUse = assign.MemoryUse(next, load, live)
	res.BytesMoved = bytesMoved
	s.bytesMoved += bytesMoved
	for i, sl := range next.Slices {
		res.Assignment[i] = SliceOut{Start: fmt.Sprintf("%#x", sl.Start), End: fmt.Sprintf("%#x", sl.End), Tasks: sl.Tasks}
	}
	s.windows++
	s.sumImb += res.Imbalance
	s.maxImb = max(s.maxImb, res.Imbalance)
	s.sumBound += res.Bound
	if s.prev != nil {
		if next != s.prev {
			s.changes++
		}
		s.sumHeld += held
		s.maxHeld = max(s.maxHeld, held)
		s.sumChurn += churn
		s.sumKeyChurn += keyChurn
	}
	s.sumSlicesPerTask += float64(len(next.Slices)) / float64(len(live))
	s.maxMem = max(s.maxMem, res.MemoryUse)
	if res.MemoryUse > 1 {
		s.overLimit++
	}
	s.prev = next
	return res, nil
}

// imbalanceBound is WindowResult.Bound: no assignment of load to live
// gives the most utilised task less than the hottest entry's share of it
// spread over maxRedundancy replicas on the tasks of the largest capacity.
func imbalanceBound(load assign.Load, live []assign.Task, maxRedundancy int) float64 {
	var total, hottest, capSum, capMax float64
	for _, e := range load {
		total += e.Load
		hottest = max(hottest, e.Load)
	}
	for _, t := range live {
		c := t.Capacity
		if c == 0 {
			c = 1
		}
		capSum += c
		capMax = max(capMax, c)
	}
	if total == 0 || capSum == 0 {
		return 1
	}
	r := float64(min(max(maxRedundancy, 1), len(live)))
	return max(1, hottest/r/capMax/(total/capSum))
}

// Summary aggregates the windows stepped so far.
func (s *Simulator) Summary() Summary {
	sum := Summary{Summary: true, Algorithm: s.cfg.Algorithm.Name(), Windows: s.windows, MaxImbalance: s.maxImb, Changes: s.changes,
		MaxMemoryUse: s.maxMem, WindowsOverLimit: s.overLimit, TotalBytesMoved: s.bytesMoved, Gated: s.gated}
	if s.windows > 0 {
		n := float64(s.windows)
		sum.MeanImbalance = s.sumImb / n
		sum.MeanSlicesPerTask = s.sumSlicesPerTask / n
		sum.MeanBound = s.sumBound / n
	}
	if s.windows > 1 {
		sum.MeanHeldImbalance = s.sumHeld / float64(s.windows-1)
		sum.MaxHeldImbalance = s.maxHeld
		sum.MeanChurn = s.sumChurn / float64(s.windows-1)
		sum.MeanKeyChurn = s.sumKeyChurn / float64(s.windows-1)
	}
	return sum
}

// withBytes records the window's "bytes" and returns load with every
// key's state: the window's load entries gain their keys' bytes, and keys
// that hold state but had no load this window get entries of their own.
func (s *Simulator) withBytes(w *Window, load assign.Load) assign.Load {
	for _, kl := range w.Keys {
		if !kl.HasBytes {
			continue
		}
		if s.bytes == nil {
			s.bytes = make(map[string]float64)
		}
		if kl.Bytes == 0 {
			delete(s.bytes, kl.Key)
		} else {
			s.bytes[kl.Key] = kl.Bytes
		}
	}
	if len(s.bytes) == 0 {
		return load
	}
	load = slices.Clone(load) // the caller keeps the load lines' own entries
	byKey := make(map[assign.SliceKey]float64, len(s.bytes))
	for k, b := range s.bytes {
		byKey[assign.HashString(k)] += b
	}
	for i := range load {
		if b, ok := byKey[load[i].Start]; ok {
			load[i].Bytes = min(b, assign.MaxBytes)
			delete(byKey, load[i].Start)
		}
	}
	for k, b := range byKey {
		load = append(load, assign.LoadEntry{Start: k, End: k + 1, Bytes: min(b, assign.MaxBytes)})
	}
	slices.SortFunc(load, func(a, b assign.LoadEntry) int { return cmp.Compare(a.Start, b.Start) })
	return load
}

// keysGained is the fraction of the keys in load (one entry per key) whose
// tasks under next include one they did not have under prev.
func keysGained(prev, next *assign.Assignment, load assign.Load) float64 {
	if len(load) == 0 {
		return 0
	}
	gained := 0
	for _, e := range load {
		before := prev.Slices[prev.Find(e.Start)].Tasks
		for _, t := range next.Slices[next.Find(e.Start)].Tasks {
			if !slices.Contains(before, t) {
				gained++
				break
			}
		}
	}
	return float64(gained) / float64(len(load))
}

// Replay reads the trace in r window by window, takes one decision per
// window and writes one JSON line per window to w, then a summary line.
// Output for the windows before a bad line is written before the error is
// returned; a *TraceError says where the trace is wrong.
func Replay(r io.Reader, w io.Writer, cfg Config) (Summary, error) {
	sim, err := NewSimulator(cfg)
	if err != nil {
		return Summary{}, err
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	tr := NewReader(r)
	for {
		win, err := tr.ReadWindow()
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil {
			var res WindowResult
			res, err = sim.Step(win)
			if err == nil {
				err = enc.Encode(res)
			}
		}
		if err != nil {
			if ferr := bw.Flush(); ferr != nil {
				return Summary{}, errors.Join(err, ferr)
			}
			return Summary{}, err
		}
	}
	if sim.windows == 0 {
		return Summary{}, fmt.Errorf("%w: no windows; a trace needs at least one {\"window\":W,\"tasks\":[...]} line", ErrInvalidTrace)
	}
	sum := sim.Summary()
	if err := enc.Encode(sum); err != nil {
		return sum, err
	}
	return sum, bw.Flush()
}
