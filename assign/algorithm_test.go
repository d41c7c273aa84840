package assign

import (
	"errors"
	"testing"
)

func TestAlgorithmByName(t *testing.T) {
	for _, name := range AlgorithmNames() {
		a, err := AlgorithmByName(name)
		if err != nil {
			t.Fatalf("AlgorithmByName(%q): %v", name, err)
		}
		if a.Name() != name {
			t.Errorf("AlgorithmByName(%q).Name() = %q", name, a.Name())
		}
	}
	if _, err := AlgorithmByName("round-robin"); !errors.Is(err, ErrUnknownAlgorithm) {
		t.Errorf("unknown name: err = %v, want ErrUnknownAlgorithm", err)
	}
}
