package assign

import (
	"bytes"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestHashKeyVectors pins the slice-key hash, a contract with clients in
// other languages: XXH64 with seed 0, shifted right by one bit. The digests
// match the reference implementation's published values where they exist
// ("", "a", "abc", the quick brown fox).
func TestHashKeyVectors(t *testing.T) {
	vectors := []struct {
		key   string
		xxh64 uint64
		slice SliceKey
	}{
		{"", 0xef46db3751d8e999, 8620854627038688460},
		{"a", 0xd24ec4f1a98c6e5b, 7577133169179506477},
		{"abc", 0x44bc2cf5ad770999, 2476441561944786124},
		{"user:42", 0xdc1fea7da8d2d1c2, 7930827119023188193},
		{"hello world", 0x45ab6734b21e6968, 2510109842829423796},
		{"slicerd", 0x4ae0971510a36ee0, 2697739235159553904},
		{"The quick brown fox jumps over the lazy dog", 0x0b242d361fda71bc, 401408172032342238},
	}
	for _, v := range vectors {
		if got := xxhash.Sum64String(v.key); got != v.xxh64 {
			t.Errorf("XXH64(%q) = %#016x, want %#016x", v.key, got, v.xxh64)
		}
		if v.slice != v.xxh64>>1 {
			t.Errorf("vector %q: slice key %d is not xxh64>>1 = %d", v.key, v.slice, v.xxh64>>1)
		}
		if got := HashKey([]byte(v.key)); got != v.slice {
			t.Errorf("HashKey(%q) = %d, want %d", v.key, got, v.slice)
		}
		if got := HashString(v.key); got != v.slice {
			t.Errorf("HashString(%q) = %d, want %d", v.key, got, v.slice)
		}
	}
}

func FuzzHashKey(f *testing.F) {
	for _, s := range []string{"", "a", "user:42", "hello world", "\x00\xff", string(make([]byte, 100))} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, key []byte) {
		h := HashKey(key)
		if h >= KeySpaceEnd {
			t.Fatalf("HashKey(%q) = %#x, not below KeySpaceEnd", key, h)
		}
		if s := HashString(string(key)); s != h {
			t.Fatalf("HashString(%q) = %#x, HashKey = %#x", key, s, h)
		}
		if again := HashKey(bytes.Clone(key)); again != h {
			t.Fatalf("HashKey(%q) is unstable: %#x then %#x", key, h, again)
		}
		if want := xxhash.Sum64(key) >> 1; h != want {
			t.Fatalf("HashKey(%q) = %#x, want xxh64>>1 = %#x", key, h, want)
		}
	})
}
