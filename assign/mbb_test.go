package assign

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMakeBeforeBreak: the intermediate assignment serves every key by its
// next tasks and its live current ones, moves every key once (its churn
// from cur is next's, the step to next churns nothing), and is nil when
// no live task loses keys.
func TestMakeBeforeBreak(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 51))
	tasks := testTasks(6)
	cur := scattered(rng, tasks, 20, 1)
	load := powerLoad(rng, 500, 1.3)
	next, d := mustDecide(t, NewWeightedMove(), cur, tasks, load, DefaultConfig())
	if !d.Changed {
		t.Fatal("test setup: the decision moved nothing")
	}
	mid, gaining := MakeBeforeBreak(cur, next, tasks)
	if mid == nil || len(gaining) == 0 {
		t.Fatal("nil for a decision that moves keys between live tasks")
	}
	if err := mid.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []SliceKey{0, KeySpaceEnd / 3, KeySpaceEnd - 1} {
		got := mid.Slices[mid.Find(k)].Tasks
		for _, want := range [][]string{next.Slices[next.Find(k)].Tasks, cur.Slices[cur.Find(k)].Tasks} {
			for _, task := range want {
				if !slices.Contains(got, task) {
					t.Errorf("key %#x: %s serves it before or after, but not in between (%v)", k, task, got)
				}
			}
		}
	}
	if c1, c2 := Churn(cur, mid), Churn(mid, next); c1 != Churn(cur, next) || c2 != 0 {
		t.Errorf("churn %g then %g; want %g then 0", c1, c2, Churn(cur, next))
	}
	// Only a departed task loses keys: nothing to make first.
	live := tasks[1:]
	gone, _ := mustDecide(t, membershipAlg{}, cur, live, nil, DefaultConfig())
	if mid, _ := MakeBeforeBreak(cur, gone, live); mid != nil {
		t.Errorf("an intermediate step for keys whose task is gone")
	}
}

func TestHandoffDeadlineValidated(t *testing.T) {
	for _, c := range []Config{
		{MinRedundancy: 1, MaxRedundancy: 1, HandoffDeadlineMS: -1},
		{MinRedundancy: 1, MaxRedundancy: 1, HandoffDeadlineMS: MaxHandoffDeadlineMS + 1},
		{MinRedundancy: 1, MaxRedundancy: 1, HandoffDeadlineMS: 100, Consistency: Strong},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v validated", c)
		}
	}
}
