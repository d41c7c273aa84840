package etcdlease_test

import (
	"testing"

	"github.com/slicerd/slicerd/lease/etcdlease"
)

// FuzzDecodeState: a guard or bridge key's value decodes without
// panicking, and only as a set lease.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2})
	f.Add([]byte{3})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := etcdlease.DecodeState(b)
		if err == nil && (!st.Set || len(b) != 17) {
			t.Fatalf("decoded %x as %+v", b, st)
		}
	})
}
