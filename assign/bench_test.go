package assign

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// fragmented returns an assignment of nTasks tasks, each serving
// slicesPerTask equal slices, round-robin: the shape a long-running job
// reaches once load balancing has split its key space.
func fragmented(tb testing.TB, nTasks, slicesPerTask int) *Assignment {
	tb.Helper()
	a := &Assignment{Job: "bench", Generation: 1}
	for i := range nTasks {
		a.Tasks = append(a.Tasks, Task{Name: fmt.Sprintf("task-%05d", i), Addr: fmt.Sprintf("10.0.%d.%d:7000", i/250, i%250)})
	}
	n := nTasks * slicesPerTask
	w := KeySpaceEnd / SliceKey(n)
	for i := range n {
		s := Slice{Start: SliceKey(i) * w, End: SliceKey(i+1) * w, Tasks: []string{a.Tasks[i%nTasks].Name}}
		if i == n-1 {
			s.End = KeySpaceEnd
		}
		a.Slices = append(a.Slices, s)
	}
	if err := a.Validate(); err != nil {
		tb.Fatal(err)
	}
	return a
}

func BenchmarkValidate(b *testing.B) {
	a := fragmented(b, 100, 100)
	b.ReportAllocs()
	for b.Loop() {
		if err := a.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidateMillion checks a job of 10,000 tasks and 10^6 slices
// and reads its slices' task indexes, as every decision does first: with
// every slice's list its own (own-lists) and as decoded from the store,
// where slices share lists (stored).
//
//	go test -run '^$' -bench ValidateMillion -count 6 ./assign/
func BenchmarkValidateMillion(b *testing.B) {
	a := scattered(rand.New(rand.NewPCG(7, 1)), testTasks(10000), 100, 1)
	for _, c := range []struct {
		name string
		a    *Assignment
	}{{"own-lists", a}, {"stored", stored(a)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.a.validate(true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkFind(b *testing.B) {
	a := fragmented(b, 100, 100)
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]SliceKey, 1024)
	for i := range keys {
		keys[i] = rng.Uint64N(KeySpaceEnd)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = a.Find(keys[i&1023])
		i++
	}
}

func BenchmarkRebalance(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		tasks := make([]Task, n)
		for i := range tasks {
			tasks[i] = Task{Name: fmt.Sprintf("task-%05d", i), Addr: fmt.Sprintf("10.0.%d.%d:7000", i/250, i%250)}
		}
		prev, err := Initial("bench", tasks, DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			live []Task
		}{
			{"join", append(tasks[:n:n], Task{Name: "task-new", Addr: "10.9.9.9:7000"})},
			{"death", append(tasks[:n/2:n/2], tasks[n/2+1:]...)},
		} {
			b.Run(fmt.Sprintf("tasks=%d/%s", n, tc.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, d, err := Rebalance(prev, tc.live, DefaultConfig()); err != nil || !d.Changed {
						b.Fatal(err, d.Changed)
					}
				}
			})
		}
	}
}

func BenchmarkMarshal(b *testing.B) {
	a := fragmented(b, 100, 100)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.MarshalBinary(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshal(b *testing.B) {
	enc, err := fragmented(b, 100, 100).MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := UnmarshalAssignment(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClone copies a job of a million slices on 10,000 tasks, as an
// Assigner does for the second step of a two-step change.
//
//	go test -run '^$' -bench '^BenchmarkClone$' -benchtime 10x -benchmem -count 6 ./assign/
func BenchmarkClone(b *testing.B) {
	a := fragmented(b, 10_000, 100)
	b.ReportAllocs()
	for b.Loop() {
		a.Clone()
	}
}
