package assign

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// checkAssignment asserts what every assignment slicerd produces must hold:
// it is valid, lists exactly the live tasks with their addresses, respects
// the redundancy bounds and has no two adjacent slices with the same tasks.
func checkAssignment(t *testing.T, a *Assignment, live []Task, cfg Config) {
	t.Helper()
	if err := a.Validate(); err != nil {
		t.Fatalf("invalid assignment: %v", err)
	}
	want := slices.Clone(live)
	slices.SortFunc(want, compareName)
	if !slices.Equal(a.Tasks, want) {
		t.Fatalf("task table %v, want the live tasks %v", a.Tasks, want)
	}
	lo := min(cfg.MinRedundancy, len(live))
	for i, s := range a.Slices {
		if len(s.Tasks) < lo || len(s.Tasks) > cfg.MaxRedundancy {
			t.Fatalf("slice %d [%#x, %#x) has %d tasks; want between %d and %d", i, s.Start, s.End, len(s.Tasks), lo, cfg.MaxRedundancy)
		}
		if i > 0 && slices.Equal(a.Slices[i-1].Tasks, s.Tasks) {
			t.Fatalf("slices %d and %d are adjacent with the same tasks %v; they should be merged", i-1, i, s.Tasks)
		}
	}
}

// widths returns each task's assigned width, the width-based load.
func widths(a *Assignment) map[string]SliceKey {
	m := make(map[string]SliceKey)
	for _, s := range a.Slices {
		for _, t := range s.Tasks {
			m[t] += s.Width()
		}
	}
	return m
}

// fairShareOf is Σ width×tasks over the slices of a, divided by n.
func fairShareOf(a *Assignment, n int) SliceKey {
	var hi, lo uint64
	for _, s := range a.Slices {
		h, l := bits.Mul64(s.Width(), uint64(len(s.Tasks)))
		var c uint64
		lo, c = bits.Add64(lo, l, 0)
		hi += h + c
	}
	q, _ := bits.Div64(hi, lo, uint64(n))
	return q
}

// heldShare is the fraction of the key space served by any task in names.
func heldShare(a *Assignment, names map[string]bool) float64 {
	var w SliceKey
	for _, s := range a.Slices {
		if slices.ContainsFunc(s.Tasks, func(n string) bool { return names[n] }) {
			w += s.Width()
		}
	}
	return float64(w) / float64(KeySpaceEnd)
}

func TestRebalanceRejects(t *testing.T) {
	prev, err := Initial("demo", namedTasks("a", "b"), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	bad := prev.Clone()
	bad.Slices[0].Tasks = []string{"nobody"}
	for _, tt := range []struct {
		name string
		prev *Assignment
		live []Task
		cfg  Config
		want error
	}{
		{"nil prev", nil, namedTasks("a"), DefaultConfig(), ErrInvalidAssignment},
		{"invalid prev", bad, namedTasks("a"), DefaultConfig(), ErrInvalidAssignment},
		{"no tasks", prev, nil, DefaultConfig(), ErrNoTasks},
		{"duplicate", prev, namedTasks("a", "a"), DefaultConfig(), ErrInvalidName},
		{"bad name", prev, namedTasks("a", "b/c"), DefaultConfig(), ErrInvalidName},
		{"bad config", prev, namedTasks("a"), Config{}, ErrInvalidConfig},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Rebalance(tt.prev, tt.live, tt.cfg); !errors.Is(err, tt.want) {
				t.Fatalf("Rebalance() = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestRebalanceNoPreviousTaskLive(t *testing.T) {
	cfg := Config{MinRedundancy: 2, MaxRedundancy: 2}
	prev, _ := Initial("demo", namedTasks("a", "b"), cfg)
	prev.Generation = 41
	live := namedTasks("x", "y", "z")
	next, d, err := Rebalance(prev, live, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAssignment(t, next, live, cfg)
	fresh, _ := Initial("demo", live, cfg)
	if next.Generation != 42 || !Equal(next, fresh) {
		t.Fatalf("got generation %d %v, want generation 42 and the initial split %v", next.Generation, next.Slices, fresh.Slices)
	}
	if !d.Changed || d.Churn != 1 || len(d.Moves) != 6 {
		t.Errorf("decision %+v: want changed, churn 1, 6 moves", d)
	}
}

func TestJoinTakesExactlyItsShare(t *testing.T) {
	prev, _ := Initial("demo", namedTasks("a", "b", "c"), DefaultConfig())
	live := namedTasks("a", "b", "c", "d")
	next, d, err := Rebalance(prev, live, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	checkAssignment(t, next, live, DefaultConfig())
	share := KeySpaceEnd / 4
	if got := widths(next)["d"]; got != share {
		t.Errorf("d serves %#x, want exactly %#x", got, share)
	}
	if want := float64(share) / float64(KeySpaceEnd); d.Churn != want {
		t.Errorf("churn %v, want %v", d.Churn, want)
	}
	// Each donor gives only what it holds above its own share, so all four
	// end within rounding of a quarter.
	for name, w := range widths(next) {
		if diff := int64(w - share); diff < -4 || diff > 4 {
			t.Errorf("%s serves %#x, want %#x", name, w, share)
		}
	}
	kinds := make([]MoveKind, len(d.Moves))
	for i, m := range d.Moves {
		kinds[i] = m.Kind
	}
	if !slices.Equal(kinds, []MoveKind{Split, Reassign, Split, Reassign, Split, Reassign}) {
		t.Errorf("moves %v, want a split and a reassign from each donor", d.Moves)
	}
}

func TestMoveString(t *testing.T) {
	m := Move{Kind: Reassign, Start: 0, End: 0x10, From: "b", To: "a", Reason: `task "b" left the job`}
	if got, want := m.String(), `reassign [0x0, 0x10) b -> a: task "b" left the job`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := MoveKind(99).String(); got != "MoveKind(99)" {
		t.Errorf("unknown kind renders as %q", got)
	}
	if got := (Move{Kind: AddReplica, End: 1, To: "x"}).String(); got != "add-replica [0x0, 0x1) +x" {
		t.Errorf("got %q", got)
	}
}

// world is the state a random property-test sequence evolves.
type world struct {
	rng    *rand.Rand
	live   []Task
	cfg    Config
	serial int
}

func (w *world) newTask() Task {
	w.serial++
	// Decimal names without padding so that name order ("t10" < "t2")
	// differs from creation order.
	return Task{Name: fmt.Sprintf("t%d", w.serial), Addr: fmt.Sprintf("10.0.%d.%d:7000", w.serial/250, w.serial%250)}
}

func (w *world) randomConfig() Config {
	lo := 1 + w.rng.IntN(3)
	return Config{MinRedundancy: lo, MaxRedundancy: lo + w.rng.IntN(4-lo)}
}

type event int

const (
	evJoin event = iota
	evDeath
	evAddr
	evConfig
	evMixed
	evNothing
	evReplaceAll
	numEvents
)

// step applies a random event and returns the tasks that joined and left.
func (w *world) step(ev event) (joined, departed map[string]bool) {
	joined, departed = map[string]bool{}, map[string]bool{}
	join := func() {
		for range 1 + w.rng.IntN(3) {
			if len(w.live) < 50 {
				t := w.newTask()
				w.live = append(w.live, t)
				joined[t.Name] = true
			}
		}
	}
	die := func() {
		for range 1 + w.rng.IntN(3) {
			if len(w.live) > 1 {
				i := w.rng.IntN(len(w.live))
				departed[w.live[i].Name] = true
				w.live = slices.Delete(w.live, i, i+1)
			}
		}
	}
	readdress := func() {
		i := w.rng.IntN(len(w.live))
		w.live[i].Addr = fmt.Sprintf("moved-%d:7000", w.rng.IntN(1e6))
	}
	switch ev {
	case evJoin:
		join()
	case evDeath:
		die()
	case evAddr:
		readdress()
	case evConfig:
		w.cfg = w.randomConfig()
	case evMixed:
		die()
		join()
		readdress()
		if w.rng.IntN(2) == 0 {
			w.cfg = w.randomConfig()
		}
	case evReplaceAll:
		for _, t := range w.live {
			departed[t.Name] = true
		}
		w.live = nil
		join()
	}
	return joined, departed
}

func TestRebalanceProperties(t *testing.T) {
	sequences, steps := 300, 40
	if testing.Short() {
		sequences = 50
	}
	for seed := range sequences {
		w := &world{rng: rand.New(rand.NewPCG(uint64(seed), 0x51ce))}
		w.cfg = w.randomConfig()
		for range 1 + w.rng.IntN(50) {
			w.live = append(w.live, w.newTask())
		}
		a, err := Initial("prop", w.live, w.cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkAssignment(t, a, w.live, w.cfg)
		for i := range steps {
			ev := event(w.rng.IntN(int(numEvents)))
			prevCfg := w.cfg
			joined, departed := w.step(ev)
			ok := t.Run(fmt.Sprintf("seed=%d/step=%d", seed, i), func(t *testing.T) {
				a = checkStep(t, w, ev, a, prevCfg, joined, departed)
			})
			if !ok {
				return
			}
		}
	}
}

func checkStep(t *testing.T, w *world, ev event, prev *Assignment, prevCfg Config, joined, departed map[string]bool) *Assignment {
	before := prev.Clone()
	input := slices.Clone(w.live)
	next, d, err := Rebalance(prev, input, w.cfg)
	if err != nil {
		t.Fatalf("event %d, %d live tasks, config %+v: %v", ev, len(w.live), w.cfg, err)
	}
	if !reflect.DeepEqual(prev, before) || !slices.Equal(input, w.live) {
		t.Fatal("Rebalance modified its input")
	}
	checkAssignment(t, next, w.live, w.cfg)
	if next.Generation != prev.Generation+1 {
		t.Fatalf("generation %d after %d", next.Generation, prev.Generation)
	}

	// Determinism: same input in another order, same output.
	shuffled := slices.Clone(w.live)
	w.rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	again, d2, err := Rebalance(prev, shuffled, w.cfg)
	if err != nil || !reflect.DeepEqual(again, next) || !reflect.DeepEqual(d2, d) {
		t.Fatalf("not deterministic: %v\n%v\n%v\n%+v\n%+v", err, next.Slices, again.Slices, d, d2)
	}

	if got := Churn(prev, next); got != d.Churn {
		t.Fatalf("decision churn %v, Churn() %v", d.Churn, got)
	}
	if d.Changed != !Equal(prev, next) {
		t.Fatalf("Changed = %v but Equal = %v", d.Changed, Equal(prev, next))
	}

	sameCfg := prevCfg.Equal(w.cfg)
	switch {
	case ev == evNothing:
		if d.Changed || d.Churn != 0 || len(d.Moves) != 0 {
			t.Fatalf("nothing happened but the decision is %+v", d)
		}
	case ev == evAddr:
		if !d.Changed || d.Churn != 0 || len(d.Moves) != 0 {
			t.Fatalf("an address change must change the assignment and move nothing; decision %+v", d)
		}
	case ev == evDeath && sameCfg && len(departed) > 0:
		if limit := heldShare(prev, departed); d.Churn > limit {
			t.Fatalf("death of %v churned %v, more than the %v they held", departed, d.Churn, limit)
		}
	case ev == evJoin && sameCfg && len(joined) > 0:
		n := len(w.live)
		share := fairShareOf(next, n)
		limit := float64(len(joined))*float64(share)/float64(KeySpaceEnd) + 1e-9
		if d.Churn > limit {
			t.Fatalf("join of %d tasks churned %v, more than their fair share %v", len(joined), d.Churn, limit)
		}
		// With redundancy unaffected, joiners take exactly their share.
		if min(w.cfg.MinRedundancy, n-len(joined)) == min(w.cfg.MinRedundancy, n) {
			loads := widths(next)
			for name := range joined {
				if loads[name] != share {
					t.Fatalf("joiner %s serves %#x, want exactly the fair share %#x", name, loads[name], share)
				}
			}
		}
	}
	for _, m := range d.Moves {
		if m.Reason == "" || m.End <= m.Start || m.Kind < Reassign || m.Kind > Merge {
			t.Fatalf("malformed move %+v", m)
		}
	}

	// Nothing changes when nothing changed.
	same, d3, err := Rebalance(next, w.live, w.cfg)
	if err != nil || d3.Changed || d3.Churn != 0 || len(d3.Moves) != 0 || !Equal(same, next) {
		t.Fatalf("a second rebalance with the same input moved something: %v %+v", err, d3)
	}
	return next
}

func TestRebalanceReasons(t *testing.T) {
	cfg := Config{MinRedundancy: 2, MaxRedundancy: 2}
	prev, _ := Initial("demo", namedTasks("a", "b", "c"), cfg)
	_, d, err := Rebalance(prev, namedTasks("a", "c"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range d.Moves {
		if m.Kind == Merge {
			continue
		}
		if m.From != "b" || !strings.Contains(m.Reason, `"b" no longer serves the job`) {
			t.Errorf("move %v does not say that b is gone", m)
		}
	}
}

// In a large job every task is only slightly off its share, so placing
// keys exactly would cut one sliver per task. A death or a join must touch
// only a handful of slices, and still leave the job close to even.
func TestLargeJobMovesInFewPieces(t *testing.T) {
	const n = 200
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("t%04d", i)
	}
	live := namedTasks(names...)
	prev, err := Initial("big", live, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name string
		live []Task
	}{
		{"death", live[1:]},
		{"join", append(slices.Clone(live[1:]), Task{Name: "t9999", Addr: "10.0.9.9:7000"})},
	} {
		next, d, err := Rebalance(prev, step.live, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		if grown := len(next.Slices) - len(prev.Slices); grown > 16 {
			t.Errorf("%s: %d slices became %d", step.name, len(prev.Slices), len(next.Slices))
		}
		if d.Churn > 1.0/float64(n-1)+1e-9 {
			t.Errorf("%s: churn %.6f, more than one task's share", step.name, d.Churn)
		}
		w := widths(next)
		var most uint64
		for _, x := range w {
			most = max(most, x)
		}
		if mean := float64(KeySpaceEnd) / float64(len(step.live)); float64(most)/mean > 1.2 {
			t.Errorf("%s: max/mean width %.3f", step.name, float64(most)/mean)
		}
		prev = next
	}
}
