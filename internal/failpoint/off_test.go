//go:build !failpoints

package failpoint

import (
	"context"
	"errors"
	"testing"
)

// A build without the tag has no points: nothing can arm one.
func TestReleaseBuildHasNoPoints(t *testing.T) {
	t.Setenv(Env, "p=error")
	if err := Enable("p", "error"); !errors.Is(err, ErrDisabled) {
		t.Fatalf("Enable = %v, want ErrDisabled", err)
	}
	if err := Hit(context.Background(), "p"); err != nil || Compiled {
		t.Fatalf("Hit = %v, Compiled %v; want nil, false", err, Compiled)
	}
}

func BenchmarkHitOff(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		_ = Hit(ctx, "guard/before-recall-guard")
	}
}
