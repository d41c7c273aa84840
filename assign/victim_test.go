package assign

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestVictimGainPerByte: when hot ranges hold little state and cold ones
// much, ranking moves by gain per byte balances as well as by gain per key
// while moving less state.
func TestVictimGainPerByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 61))
	tasks := testTasks(8)
	prev := scattered(rng, tasks, 40, 1)
	load := powerLoad(rng, 3200, 1.2)
	for i := range load {
		load[i].Bytes = math.Round(1e6 / load[i].Load)
	}
	run := func(victim string) (imb, moved float64) {
		cfg := Config{MinRedundancy: 1, MaxRedundancy: 2, Victim: victim}
		a := prev
		for range 20 {
			next, d := mustDecide(t, NewWeightedMove(), a, tasks, load, cfg)
			if !d.Changed {
				break
			}
			moved += BytesMoved(a, next, load)
			a = next
		}
		return Imbalance(a, load), moved
	}
	keyImb, keyMoved := run(VictimGainPerKey)
	byteImb, byteMoved := run(VictimGainPerByte)
	t.Logf("gain-per-key: imbalance %.3f, %.3g bytes moved; gain-per-byte: imbalance %.3f, %.3g bytes moved", keyImb, keyMoved, byteImb, byteMoved)
	if byteImb > 1.1 || keyImb > 1.1 {
		t.Errorf("imbalance %.3f (per key) and %.3f (per byte); both should balance", keyImb, byteImb)
	}
	if byteMoved >= keyMoved {
		t.Errorf("gain-per-byte moved %.3g bytes, not less than gain-per-key's %.3g", byteMoved, keyMoved)
	}
	bad := Config{MinRedundancy: 1, MaxRedundancy: 1, Victim: "random"}
	if err := bad.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("victim \"random\": Validate = %v", err)
	}
}
