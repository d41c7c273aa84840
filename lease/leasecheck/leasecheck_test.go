package leasecheck

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func op(task, key string, token uint64, start, end int) Op {
	return Op{Task: task, Key: key, Token: token, Start: time.Duration(start), End: time.Duration(end)}
}

// The checker finds what it must and nothing else: a test of the test
// tool, since the end-to-end runs pass only if it finds nothing.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ops           []Op
		doubles, regr int
	}{
		{"one owner at a time", []Op{op("a", "k", 1, 0, 10), op("a", "k", 1, 5, 15), op("b", "k", 2, 16, 20)}, 0, 0},
		{"overlapping owners", []Op{op("a", "k", 1, 0, 10), op("b", "k", 2, 9, 20)}, 1, 0},
		{"touching spans overlap", []Op{op("a", "k", 1, 0, 10), op("b", "k", 2, 10, 20)}, 1, 0},
		{"other keys do not count", []Op{op("a", "k", 1, 0, 10), op("b", "j", 1, 5, 20)}, 0, 0},
		{"a long request under another", []Op{op("a", "k", 1, 0, 100), op("a", "k", 1, 1, 2), op("b", "k", 2, 50, 60)}, 1, 0},
		{"token back after the owner changed", []Op{op("a", "k", 5, 0, 10), op("b", "k", 3, 11, 20)}, 0, 1},
		{"same task, older handle ends later", []Op{op("a", "k", 5, 0, 30), op("a", "k", 7, 10, 20)}, 0, 0},
		{"token back on one task after a gap", []Op{op("a", "k", 7, 0, 10), op("a", "k", 5, 20, 30)}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.ops)
			if r.DoubleOwners != tc.doubles || r.TokenRegression != tc.regr {
				t.Fatalf("Check = %v (%v), want %d double owners and %d regressions", r, r.Examples, tc.doubles, tc.regr)
			}
			if r.OK() != (tc.doubles == 0 && tc.regr == 0) {
				t.Errorf("OK() = %v", r.OK())
			}
		})
	}
}

// Records round-trip through a file, keys with spaces included; a line cut
// short is skipped.
func TestRecords(t *testing.T) {
	ops := []Op{op("kv-0", "key 1", 3, 100, 200), op("kv-1", "k", 9, 300, 300)}
	var b []byte
	for _, o := range ops {
		b = AppendRecord(b, o)
	}
	b = append(b, "kv-2 4 500"...) // a writer killed mid-line
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.rec"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRecords(filepath.Join(dir, "*.rec"))
	if err != nil || !slices.Equal(got, ops) {
		t.Fatalf("ReadRecords = %v, %v; want %v", got, err, ops)
	}
}

func BenchmarkCheck(b *testing.B) {
	var ops []Op
	for i := range 100_000 {
		k := string(rune('a' + i%26))
		ops = append(ops, op("t"+k, k, uint64(i/1000), i*10, i*10+5))
	}
	b.ResetTimer()
	for range b.N {
		if r := Check(ops); !r.OK() {
			b.Fatal(r)
		}
	}
}
