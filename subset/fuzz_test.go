package subset

import (
	"slices"
	"testing"
)

// FuzzRocksteadier checks the invariants clients rely on: min(k, n)
// distinct indices in 0..n-1, the same answer every time, and a prefix of
// the answer for a larger k.
func FuzzRocksteadier(f *testing.F) {
	f.Add(uint64(0), uint16(10), uint16(3))
	f.Add(uint64(13), uint16(55), uint16(10))
	f.Add(uint64(1<<63+7), uint16(641), uint16(40))
	f.Add(uint64(9), uint16(1), uint16(1))
	f.Fuzz(func(t *testing.T, frontend uint64, n16, k16 uint16) {
		n, k := int(n16%2048), int(k16%256)
		got := Rocksteadier(frontend, n, k)
		want := min(max(k, 0), n)
		if n == 0 || k == 0 {
			want = 0
		}
		if len(got) != want {
			t.Fatalf("Rocksteadier(%d, %d, %d) has %d entries, want %d", frontend, n, k, len(got), want)
		}
		seen := make(map[int]bool, len(got))
		for _, b := range got {
			if b < 0 || b >= n {
				t.Fatalf("Rocksteadier(%d, %d, %d) = %v: %d out of range", frontend, n, k, got, b)
			}
			if seen[b] {
				t.Fatalf("Rocksteadier(%d, %d, %d) = %v: %d twice", frontend, n, k, got, b)
			}
			seen[b] = true
		}
		if again := Rocksteadier(frontend, n, k); !slices.Equal(got, again) {
			t.Fatalf("Rocksteadier(%d, %d, %d) not deterministic: %v then %v", frontend, n, k, got, again)
		}
		if longer := Rocksteadier(frontend, n, k+1); k > 0 && n > 0 && !slices.Equal(got, longer[:len(got)]) {
			t.Fatalf("Rocksteadier(%d, %d, %d) = %v, not a prefix of k+1's %v", frontend, n, k, got, longer)
		}
	})
}
