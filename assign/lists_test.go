package assign

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// sameArray reports whether lists a and b are one list, not equal copies.
func sameArray(a, b []string) bool {
	return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// spelledBy reports whether every name of list is the string of the task
// table, not a copy of its bytes.
func spelledBy(list []string, tasks []Task) bool {
	for _, n := range list {
		i, ok := slices.BinarySearchFunc(tasks, n, func(t Task, n string) int { return strings.Compare(t.Name, n) })
		if !ok || unsafe.StringData(tasks[i].Name) != unsafe.StringData(n) {
			return false
		}
	}
	return true
}

func TestTaskListsShare(t *testing.T) {
	tasks := namedTasks("a", "b", "c", "d")
	l := NewTaskLists(tasks)
	// Names spelled afresh, as a decoded message's are.
	spell := func(names ...string) []string {
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = strings.Clone(n)
		}
		return out
	}
	b1, c, b2 := l.Of(spell("b")), l.Of(spell("c")), l.Of(spell("b"))
	if !sameArray(b1, b2) || sameArray(b1, c) || !slices.Equal(b1, []string{"b"}) || !slices.Equal(c, []string{"c"}) {
		t.Fatalf("one-task lists: b %v, c %v, b again %v: want b's twice one list", b1, c, b2)
	}
	ab1, ab2, ac, ab3 := l.Of(spell("a", "b")), l.Of(spell("a", "b")), l.Of(spell("a", "c")), l.Of(spell("a", "b"))
	if !sameArray(ab1, ab2) || sameArray(ab2, ac) || sameArray(ac, ab3) {
		t.Fatal("a list naming what the list before names is not that list, or one naming other tasks is")
	}
	for _, list := range [][]string{b1, c, ab1, ac, ab3} {
		if !spelledBy(list, tasks) {
			t.Fatalf("list %v keeps the caller's strings, not the task table's", list)
		}
		if cap(list) != len(list) {
			t.Fatalf("list %v has room to append in place (cap %d)", list, cap(list))
		}
	}
	if !slices.Equal(ab1, []string{"a", "b"}) || !slices.Equal(ac, []string{"a", "c"}) || !slices.Equal(ab3, []string{"a", "b"}) {
		t.Fatalf("lists name the wrong tasks: %v %v %v", ab1, ac, ab3)
	}
	// Appending to a shared list must not write into another's.
	_ = append(ab3, "d")
	if !slices.Equal(ac, []string{"a", "c"}) {
		t.Fatalf("appending to one list changed the next: %v", ac)
	}
}

func TestTaskListsCopyWhatIsNotValid(t *testing.T) {
	l := NewTaskLists(namedTasks("a", "b", "c"))
	// Unknown names are copied; misordered or repeated ones are lists as
	// any other: validation rejects both.
	for _, names := range [][]string{nil, {"x"}, {"b", "a"}, {"a", "a"}, {"a", "x"}, {"c", "b", "a"}} {
		got := l.Of(names)
		if !slices.Equal(got, names) {
			t.Fatalf("Of(%q) = %q, want a list equal to it", names, got)
		}
		if len(names) > 0 && sameArray(got, names) {
			t.Fatalf("Of(%q) returned the caller's own array", names)
		}
	}
	a := &Assignment{Job: "j", Generation: 1, Tasks: namedTasks("a", "b"), Slices: []Slice{{Start: 0, End: KeySpaceEnd, Tasks: l.Of([]string{"b", "a"})}}}
	if err := a.Validate(); err == nil || !strings.Contains(err.Error(), "not sorted") {
		t.Fatalf("an assignment with a copied misordered list validates as %v, want the misorder named", err)
	}
}

// TestDecodeSharesLists: the store's decoder gives the slices of one task
// one list, and consecutive slices of the same tasks one list, spelled
// with the task table's strings.
func TestDecodeSharesLists(t *testing.T) {
	tasks := namedTasks("a", "b", "c")
	w := KeySpaceEnd / 6
	a := &Assignment{Job: "j", Generation: 3, Tasks: tasks, Slices: []Slice{
		{0, w, []string{"a"}}, {w, 2 * w, []string{"b", "c"}}, {2 * w, 3 * w, []string{"b", "c"}},
		{3 * w, 4 * w, []string{"c"}}, {4 * w, 5 * w, []string{"a"}}, {5 * w, KeySpaceEnd, []string{"a", "c"}},
	}}
	_, got := roundTrip(t, a)
	if !Equal(got, a) {
		t.Fatalf("round trip: %+v, want %+v", got, a)
	}
	s := got.Slices
	if !sameArray(s[0].Tasks, s[4].Tasks) || !sameArray(s[1].Tasks, s[2].Tasks) || sameArray(s[2].Tasks, s[5].Tasks) {
		t.Fatal("decoded lists are not shared as they should be")
	}
	for _, sl := range s {
		if !spelledBy(sl.Tasks, got.Tasks) || cap(sl.Tasks) != len(sl.Tasks) {
			t.Fatalf("decoded list %v is not the task table's strings, or has room to append in place", sl.Tasks)
		}
	}
}

// TestTaskListsArenas: with Reserve, lists of two tasks or more fill one
// array with no room to spare; without it, the arenas never have more
// room than a quarter of what they hold, or 1,024 names, besides the few
// names at the end of a full arena that the next list did not fit in;
// and every list names its tasks either way.
func TestTaskListsArenas(t *testing.T) {
	tasks := make([]Task, 50)
	for i := range tasks {
		tasks[i] = Task{Name: fmt.Sprintf("t%02d", i)}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{100, 3000, 7000, 20000, 41000} {
		lists := make([][]int32, n)
		names := 0
		for i := range lists {
			for i == 0 || slices.Equal(lists[i], lists[i-1]) { // a repeat would share
				k := 2 + rng.IntN(3)
				first := rng.IntN(len(tasks) - k + 1)
				lists[i] = lists[i][:0]
				for j := range k {
					lists[i] = append(lists[i], int32(first+j))
				}
				if i == 0 {
					break
				}
			}
			names += len(lists[i])
		}
		reserved := NewTaskLists(tasks)
		reserved.Reserve(names)
		grown := NewTaskLists(tasks)
		for i, ids := range lists {
			want := make([]string, len(ids))
			for j, id := range ids {
				want[j] = tasks[id].Name
			}
			if r, g := reserved.ofIndexes(ids), grown.ofIndexes(ids); !slices.Equal(r, want) || !slices.Equal(g, want) {
				t.Fatalf("%d lists: list %d is %v / %v, want %v", n, i, r, g, want)
			}
		}
		if reserved.made != names || reserved.used != names {
			t.Fatalf("%d lists of %d names: reserved arenas have room for %d and hold %d, want exactly the names", n, names, reserved.made, reserved.used)
		}
		if grown.used != names || grown.made > names+max(1024, names/4)+64 {
			t.Fatalf("%d lists of %d names: arenas grown as needed have room for %d and hold %d, want at most a quarter more", n, names, grown.made, grown.used)
		}
	}
}

// TestCloneSharesNothing: a clone equals its original, and writing into
// either's lists or tables leaves the other as it was; a nil clone is
// nil.
func TestCloneSharesNothing(t *testing.T) {
	if (*Assignment)(nil).Clone() != nil {
		t.Fatal("a nil assignment's clone is not nil")
	}
	// The samples share lists with each other (a decision's with the
	// assignment it started from), so each write is a new name.
	for k, a := range sampleAssignments(t) {
		orig := a.Clone()
		c := a.Clone()
		if !reflect.DeepEqual(c, a) {
			t.Fatalf("clone %+v differs from %+v", c, a)
		}
		for i := range c.Slices {
			c.Slices[i].Tasks[0] = fmt.Sprintf("clone-%d", k)
			if cap(c.Slices[i].Tasks) != len(c.Slices[i].Tasks) {
				t.Fatalf("slice %d's list in the clone has room to append in place", i)
			}
		}
		c.Tasks[0].Name = "written"
		if !reflect.DeepEqual(a, orig) {
			t.Fatal("writing into a clone changed its original")
		}
		c = a.Clone()
		a.Slices[0].Tasks[0] = fmt.Sprintf("original-%d", k)
		if reflect.DeepEqual(a, orig) || !reflect.DeepEqual(c, orig) {
			t.Fatal("writing into the original changed its clone")
		}
	}
}
