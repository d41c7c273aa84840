package clerk

import (
	"math/bits"
	"time"

	"github.com/slicerd/slicerd/assign"
)

// Table is an immutable lookup structure over one assignment, built once per
// generation so that every lookup is a hash and a binary search with no
// allocation and no lock. Readers share a *Table freely.
type Table struct {
	a     *assign.Assignment
	ends  []assign.SliceKey // ends[i] is the exclusive end of slice i
	addrs [][]string        // addrs[i][j] is the address of a.Slices[i].Tasks[j]
	// With many slices, idx narrows the search: the slice keys with the
	// same top idxBits bits (a bucket b) lie in slices idx[b] to
	// idx[b+1], inclusive. nil for small tables, which fit in the cache.
	idx   []uint32
	shift uint // 63 - idxBits
	// installed is when a Clerk installed the table; zero for a table
	// made with NewTable.
	installed time.Time
}

// newTableAt is NewTable for a table a Clerk installs at installed.
func newTableAt(a *assign.Assignment, installed time.Time) *Table {
	t := NewTable(a)
	t.installed = installed
	return t
}

// NewTable builds the lookup table of a, which must be valid (see
// assign.Assignment.Validate) and must not change afterwards.
func NewTable(a *assign.Assignment) *Table {
	t := &Table{
		a:     a,
		ends:  make([]assign.SliceKey, len(a.Slices)),
		addrs: make([][]string, len(a.Slices)),
	}
	n := 0
	for _, s := range a.Slices {
		n += len(s.Tasks)
	}
	// One backing array for all address lists; the capacity limit on each
	// sub-slice keeps a caller's append from writing into its neighbour.
	flat := make([]string, 0, n)
	for i, s := range a.Slices {
		t.ends[i] = s.End
		from := len(flat)
		for _, name := range s.Tasks {
			var addr string
			if k, ok := a.TaskIndex(name); ok {
				addr = a.Tasks[k].Addr
			}
			flat = append(flat, addr)
		}
		t.addrs[i] = flat[from:len(flat):len(flat)]
	}
	t.buildIndex()
	return t
}

// indexFrom is the number of slices from which a table gets an index: a
// binary search over fewer slice ends stays within a few cache lines.
const indexFrom = 4096

// buildIndex makes t.idx, about one bucket per 8 slices.
func (t *Table) buildIndex() {
	n := len(t.ends)
	if n < indexFrom {
		return
	}
	b := uint(bits.Len(uint(n/8)) - 1) // 2^b <= n/8
	t.shift = 63 - b
	t.idx = make([]uint32, 1<<b+1)
	for i := range 1 << b {
		t.idx[i] = uint32(t.search(0, n, assign.SliceKey(i)<<t.shift))
	}
	t.idx[1<<b] = uint32(n - 1)
}

// Assignment returns the assignment the table was built from.
func (t *Table) Assignment() *assign.Assignment { return t.a }

// Lookup returns the index of the slice that contains slice key h
// (h < assign.KeySpaceEnd), the same as t.Assignment().Find(h).
func (t *Table) Lookup(h assign.SliceKey) int {
	if t.idx != nil {
		b := h >> t.shift
		return t.search(int(t.idx[b]), int(t.idx[b+1])+1, h)
	}
	return t.search(0, len(t.ends), h)
}

// search returns the first slice in [lo, hi) whose end is above h.
func (t *Table) search(lo, hi int, h assign.SliceKey) int {
	ends := t.ends
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ends[m] <= h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Addrs returns the addresses of the tasks of slice i, in the order of
// Names(i). An entry is empty when the task advertised no address.
func (t *Table) Addrs(i int) []string { return t.addrs[i] }

// Names returns the names of the tasks of slice i, sorted.
func (t *Table) Names(i int) []string { return t.a.Slices[i].Tasks }
