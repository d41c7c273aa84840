//go:build failpoints

package guard_test

import (
	"errors"
	"testing"

	"github.com/slicerd/slicerd/internal/failpoint"
	"github.com/slicerd/slicerd/lease"
)

// An error injected right after the guard's recall stops the move there,
// the guard recalled and the bridge open; the next step finishes it.
// (go test -tags failpoints ./lease/guard/)
func TestStepFailpointAfterRecall(t *testing.T) {
	ctx := t.Context()
	m, d, held := guardAt1(t)
	if err := failpoint.Enable("guard/after-recall-guard", "1*error"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { failpoint.Disable("guard/after-recall-guard") })
	if _, err := d.Step(ctx, held, 2); !errors.Is(err, failpoint.ErrInjected) {
		t.Fatalf("Step to 2 = %v; want the injected error", err)
	}
	if g, b := state(t, m, lease.Guard), state(t, m, lease.Bridge); !g.Recalled || g.Value != lease.GuardValue(1) || b.Value != (lease.Value{From: 1, To: 2}) {
		t.Fatalf("guard %+v, bridge %+v; want the guard recalled at 1 beside the bridge 1→2", g, b)
	}
	if mv, err := d.Step(ctx, held, 2); err != nil || mv.To != 2 {
		t.Fatalf("next Step = %+v, %v; want it to finish the move to 2", mv, err)
	}
	if g := state(t, m, lease.Guard); g.Recalled || g.Value != lease.GuardValue(2) {
		t.Fatalf("guard %+v; want open at 2", g)
	}
}
