package lease_test

import (
	"bytes"
	"testing"

	"github.com/slicerd/slicerd/lease"
)

// FuzzDecodeState: the embedded manager's stored state decodes without
// panicking, and what decodes encodes back to the same bytes, so a state
// the manager accepts is one it wrote.
func FuzzDecodeState(f *testing.F) {
	valid := make([]byte, 43)
	valid[7] = 3 // epoch 3
	valid[8] = 1 // version
	valid[9] = 3 // guard set and recalled
	valid[17], valid[25] = 5, 5
	f.Add(valid)
	f.Add(make([]byte, 43))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		enc, err := lease.DecodeStateForTest(b)
		if err != nil {
			return
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("decoded %x, encoded back as %x", b, enc)
		}
	})
}
