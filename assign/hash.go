package assign

import "github.com/cespare/xxhash/v2"

// SliceKey is a position in the hashed key space [0, KeySpaceEnd).
type SliceKey = uint64

// KeySpaceEnd is the exclusive upper bound of the slice-key space, 2^63.
const KeySpaceEnd SliceKey = 1 << 63

// HashKey maps an application key to its slice key: the XXH64 digest of the
// key's bytes with seed 0, shifted right by one bit so it fits in 63 bits.
//
// This is a public contract: clients in other languages compute the same
// value with any XXH64 implementation (see docs/api.md for test vectors).
func HashKey(key []byte) SliceKey {
	return xxhash.Sum64(key) >> 1
}

// HashString is HashKey for a string key, without copying it.
func HashString(key string) SliceKey {
	return xxhash.Sum64String(key) >> 1
}
