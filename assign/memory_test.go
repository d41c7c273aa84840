package assign

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// withBytes returns l with each entry's Bytes drawn from a log-normal
// distribution around mean bytes: state size independent of load, as a
// cache's entry sizes are.
func withBytes(rng *rand.Rand, l Load, mean float64) Load {
	out := slices.Clone(l)
	for i := range out {
		out[i].Bytes = math.Round(mean * math.Exp(rng.NormFloat64()*0.8-0.32))
	}
	return out
}

// checkWithinLimits fails the test if a task of a holds more bytes under
// l than its limit in live.
func checkWithinLimits(t *testing.T, what string, a *Assignment, l Load, live []Task) {
	t.Helper()
	if over := MemoryOverage(a, l, live); over > 0 {
		b := TaskBytes(a, l)
		for i, task := range a.Tasks {
			for _, lt := range live {
				if lt.Name == task.Name && lt.MemoryLimit > 0 && b[i] > lt.MemoryLimit {
					t.Errorf("%s: %s holds %.0f bytes, limit %.0f", what, task.Name, b[i], lt.MemoryLimit)
				}
			}
		}
	}
}

// limited gives every task the same memory limit: factor times the mean
// bytes a task would hold if state were spread evenly.
func limited(tasks []Task, l Load, r int, factor float64) []Task {
	var total float64
	for _, e := range l {
		total += e.Bytes
	}
	out := slices.Clone(tasks)
	for i := range out {
		out[i].MemoryLimit = math.Ceil(factor * total * float64(r) / float64(len(out)))
	}
	return out
}

// TestWeightedMoveKeepsMemoryLimits: under a skewed load whose hot ranges
// are not where the state is, repeated load-driven decisions still lower
// the imbalance, and after every one no task holds more state than its
// limit, while the same decisions without limits take tasks well past it.
func TestWeightedMoveKeepsMemoryLimits(t *testing.T) {
	for _, r := range []int{1, 2} {
		t.Run(fmt.Sprintf("redundancy%d", r), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, uint64(r)))
			// Hot ranges hold little state and cold ones much: balancing
			// load alone piles state on the tasks without hot ranges.
			load := powerLoad(rng, 3000, 1.1)
			for i := range load {
				load[i].Bytes = math.Round(1e6 / math.Sqrt(load[i].Load))
			}
			cfg := Config{MinRedundancy: r, MaxRedundancy: r + 2}
			live := limited(testTasks(10), load, r, 1.1)
			start := scattered(rng, testTasks(10), 20, r)
			blindOver := 0.0
			for _, tasks := range [][]Task{live, testTasks(10)} {
				a := start
				first := Imbalance(start, load)
				for i := range 20 {
					next, d := mustDecide(t, NewWeightedMove(), a, tasks, load, cfg)
					if !d.Changed {
						break
					}
					a = next
					if tasks[0].MemoryLimit > 0 {
						checkWithinLimits(t, fmt.Sprintf("decision %d", i+1), a, load, live)
					}
				}
				if tasks[0].MemoryLimit == 0 {
					blindOver = MemoryOverage(a, load, live)
					t.Logf("without limits: imbalance %.3f, %.3g bytes past the limits", Imbalance(a, load), blindOver)
					continue
				}
				if got := Imbalance(a, load); got > 1.1 {
					t.Errorf("imbalance %.3f after the decisions (%.3f before): the limits stopped balancing", got, first)
				} else {
					t.Logf("with limits: imbalance %.3f (%.3f before)", got, first)
				}
			}
			if blindOver == 0 {
				t.Errorf("without limits no task passed the limit; the test no longer tells the two apart")
			}
		})
	}
}

// TestMembershipKeepsMemoryLimits: when a task leaves, its slices go to
// tasks with room for them rather than to the least-loaded one, and a
// task that joins takes only what fits its limit.
func TestMembershipKeepsMemoryLimits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	tasks := testTasks(6)
	prev := scattered(rng, tasks, 40, 1)
	// State sits on the lower half of the key space: the tasks serving
	// it are full, the others nearly empty but low on key count too.
	load := make(Load, 0, len(prev.Slices))
	for _, s := range prev.Slices {
		b := 0.0
		if s.Start < KeySpaceEnd/2 {
			b = 1e6
		}
		load = append(load, LoadEntry{Start: s.Start, End: s.End, Bytes: b})
	}
	held := TaskBytes(prev, load)
	live := slices.Clone(tasks)
	for i := range live {
		live[i].MemoryLimit = max(held[i], 1e6) * 1.6
	}
	leaver := 0
	for i := range held {
		if held[i] > held[leaver] {
			leaver = i
		}
	}
	left := slices.Delete(slices.Clone(live), leaver, leaver+1)
	next, d, err := Membership("j", prev, left, load, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Validate(); err != nil {
		t.Fatal(err)
	}
	checkWithinLimits(t, "after a task left", next, load, left)
	if d.Churn == 0 {
		t.Fatalf("nothing moved")
	}

	// A joiner whose limit is a quarter of a full share.
	joiner := Task{Name: "t99999", Addr: "10.9.9.9:80", MemoryLimit: 2.5e6}
	withJoiner := append(slices.Clone(left), joiner)
	joined, _, err := Membership("j", next, withJoiner, load, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	checkWithinLimits(t, "after a task joined", joined, load, withJoiner)
	if _, ok := joined.TaskIndex(joiner.Name); !ok {
		t.Errorf("the joiner took nothing")
	}
}

// TestMemoryRelief: a task past its limit (its state grew) sheds slices to
// tasks with room in the next decision, load-driven or not, dropping
// surplus replicas first; with the same tasks and every task within its
// limit Membership changes nothing.
func TestMemoryRelief(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	tasks := testTasks(4)
	prev := scattered(rng, tasks, 30, 1)
	load := make(Load, 0, len(prev.Slices))
	for _, s := range prev.Slices {
		load = append(load, LoadEntry{Start: s.Start, End: s.End, Load: 1, Bytes: 1e3})
	}
	live := slices.Clone(tasks)
	held := TaskBytes(prev, load)
	for i := range live {
		live[i].MemoryLimit = 32e3
	}
	if slices.Max(held) <= 32e3 {
		t.Fatalf("test setup: no task is past its limit (%v)", held)
	}
	for _, decide := range []struct {
		name string
		f    func() (*Assignment, Decision, error)
	}{
		{"membership", func() (*Assignment, Decision, error) { return Membership("j", prev, live, load, DefaultConfig()) }},
		{"weighted-move", func() (*Assignment, Decision, error) {
			return NewWeightedMove().Decide("j", prev, live, load, DefaultConfig())
		}},
	} {
		next, d, err := decide.f()
		if err != nil {
			t.Fatalf("%s: %v", decide.name, err)
		}
		checkWithinLimits(t, decide.name, next, load, live)
		relief := 0
		for _, m := range d.Moves {
			if (m.Kind == Reassign || m.Kind == RemoveReplica) && strings.Contains(m.Reason, "above its memory limit") {
				relief++
			}
		}
		if relief == 0 {
			t.Errorf("%s: no move gives the memory limit as its reason: %v", decide.name, d.Moves)
		}
		_, d2, err := Membership("j", next, live, load, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		if d2.Changed {
			t.Errorf("%s: a second membership decision with every task within its limit changed the assignment: %v", decide.name, d2.Moves)
		}
	}
}

// TestMemoryInfeasible: when the state is larger than every limit added
// up, every key still has an owner and no decision fails.
func TestMemoryInfeasible(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	tasks := testTasks(5)
	for i := range tasks {
		tasks[i].MemoryLimit = 1e3
	}
	load := withBytes(rng, powerLoad(rng, 500, 1.5), 1e4)
	var a *Assignment
	for i := range 5 {
		a, _ = mustDecide(t, NewWeightedMove(), a, tasks, load, DefaultConfig())
		if i == 2 {
			tasks = tasks[:4] // one leaves: its slices still find owners
		}
	}
	next, _, err := Membership("j", a, tasks, load, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestMemoryLimitValidated: a limit outside [1, MaxBytes] (other than 0,
// no limit) is refused with ErrInvalidMemoryLimit, and so is an
// assignment recording one; bad byte counts in load are ErrInvalidLoad.
func TestMemoryLimitValidated(t *testing.T) {
	for _, b := range []float64{-1, math.NaN(), math.Inf(1), 0.5, 2 * MaxBytes} {
		live := testTasks(2)
		live[1].MemoryLimit = b
		if _, _, err := NewWeightedMove().Decide("j", nil, live, nil, DefaultConfig()); !errors.Is(err, ErrInvalidMemoryLimit) {
			t.Errorf("memory limit %v: err = %v, want ErrInvalidMemoryLimit", b, err)
		}
	}
	for _, b := range []float64{0, 1, 1 << 30, MaxBytes} {
		if err := ValidateMemoryLimit(b); err != nil {
			t.Errorf("ValidateMemoryLimit(%v) = %v", b, err)
		}
	}
	a, err := Initial("j", testTasks(2), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	a.Tasks[0].MemoryLimit = 1e9
	if err := a.Validate(); !errors.Is(err, ErrInvalidAssignment) {
		t.Errorf("assignment recording a memory limit: Validate = %v, want ErrInvalidAssignment", err)
	}
	for _, b := range []float64{-1, math.NaN(), math.Inf(1), 2 * MaxBytes} {
		l := Load{{Start: 0, End: 10, Load: 1, Bytes: b}}
		if err := l.Validate(); !errors.Is(err, ErrInvalidLoad) {
			t.Errorf("bytes %v: Validate = %v, want ErrInvalidLoad", b, err)
		}
	}
}

// TestMergeLoadsBytes: loads add up where reports overlap, bytes do not:
// each piece keeps the largest report, pro rata to its width.
func TestMergeLoadsBytes(t *testing.T) {
	got := MergeLoads(
		Load{{Start: 0, End: 100, Load: 10, Bytes: 1000}},
		Load{{Start: 50, End: 100, Load: 4, Bytes: 800}},
		Load{{Start: 200, End: 300, Bytes: 5}},
	)
	want := Load{
		{Start: 0, End: 50, Load: 5, Bytes: 500},
		{Start: 50, End: 100, Load: 9, Bytes: 800},
		{Start: 200, End: 300, Bytes: 5},
	}
	if !slices.Equal(got, want) {
		t.Errorf("MergeLoads = %v, want %v", got, want)
	}
	if b := got.BytesIn(25, 75); b != 250+400 {
		t.Errorf("BytesIn(25, 75) = %v, want 650", b)
	}
}
