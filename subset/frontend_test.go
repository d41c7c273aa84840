package subset

import (
	"strconv"
	"testing"
)

func TestTaskNumber(t *testing.T) {
	for _, c := range []struct {
		name string
		want uint64
		ok   bool
	}{
		{"kv-7", 7, true},
		{"task07", 7, true},
		{"7", 7, true},
		{"kv-0", 0, true},
		{"slicelet-12345", 12345, true},
		{"a1b22", 22, true},
		{"kv-18446744073709551615", 18446744073709551615, true},
		{"kv-18446744073709551616", 0, false}, // overflows uint64
		{"kv-99999999999999999999", 0, false},
		{"kv", 0, false},
		{"kv-7a", 0, false},
		{"kv-", 0, false},
		{"", 0, false},
		{"kv-٣", 0, false}, // only ASCII digits count
	} {
		got, ok := TaskNumber(c.name)
		if got != c.want || ok != c.ok {
			t.Errorf("TaskNumber(%q) = %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func FuzzTaskNumber(f *testing.F) {
	for _, s := range []string{"kv-7", "task07", "", "x", "18446744073709551616", "a0001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, ok := TaskNumber(name)
		i := len(name)
		for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
			i--
		}
		want, err := strconv.ParseUint(name[i:], 10, 64)
		if wantOK := i < len(name) && err == nil; ok != wantOK || (ok && got != want) {
			t.Fatalf("TaskNumber(%q) = %d, %v; strconv says %d, %v", name, got, ok, want, err)
		}
	})
}

// The hash is part of the contract between clients: a subscriber keeps its
// frontend number across restarts and versions.
func TestFrontendIndexStable(t *testing.T) {
	if got, want := FrontendIndex("clerk-a"), FrontendIndex("clerk-a"); got != want {
		t.Fatalf("FrontendIndex not deterministic: %d, %d", got, want)
	}
	// xxhash64 with seed 0 of "" is a published constant.
	if got := FrontendIndex(""); got != 0xef46db3751d8e999 {
		t.Fatalf("FrontendIndex(\"\") = %#x, want xxhash64's 0xef46db3751d8e999", got)
	}
	if FrontendIndex("clerk-a") == FrontendIndex("clerk-b") {
		t.Fatal("distinct ids hash alike")
	}
}
