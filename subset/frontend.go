package subset

import "github.com/cespare/xxhash/v2"

// FrontendIndex returns a frontend number for a subscriber that has no task
// number: the xxhash64 of id. It is stable across processes, versions and
// machines, so a restarted subscriber with the same id picks the same
// Distributors. Hashed numbers are spread at random, so subscribers
// numbered this way do not coordinate: their connection balance is about
// that of random subsetting, while churn and spread keep Rocksteadier's
// properties. Prefer TaskNumber when the subscribers are numbered 0..M-1.
func FrontendIndex(id string) uint64 {
	return xxhash.Sum64String(id)
}

// TaskNumber extracts the task number at the end of a task name: the
// longest run of ASCII digits '0'-'9' that ends the name, read as a decimal
// number. Whatever precedes the digits is ignored, so "kv-7", "kv7",
// "task07" and "7" all give 7. It reports false when the name does not end
// in a digit ("kv", "kv-7a", "") or when the number does not fit in a
// uint64. Names that differ only in leading zeros ("kv-7", "kv-07") give
// the same number; callers must keep task numbers unique.
//
// Subscribers numbered 0..M-1 this way get Rocksteadier's balance: each
// complete lot of LotSize consecutive numbers covers the backends evenly.
func TaskNumber(name string) (uint64, bool) {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	if i == len(name) {
		return 0, false
	}
	var v uint64
	for _, c := range []byte(name[i:]) {
		d := uint64(c - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
