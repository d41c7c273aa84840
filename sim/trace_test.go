package sim

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/slicerd/slicerd/assign"
)

func readAll(t testing.TB, trace string) ([]*Window, error) {
	t.Helper()
	r := NewReader(strings.NewReader(trace))
	var ws []*Window
	for {
		w, err := r.ReadWindow()
		if err == io.EOF {
			return ws, nil
		}
		if err != nil {
			return ws, err
		}
		ws = append(ws, w)
	}
}

func TestParseTraceAccepts(t *testing.T) {
	trace := `{"window":0,"tasks":["t0","t1"]}
{"window":0,"key":"user:1","load":2.5}

  {"window":0,"key":"user:2","load":0}
{"window":0,"key":"user:1","load":1}
{"window":3,"key":"user:3","load":1e3}
{"window":5,"tasks":["t1","t2","T3:x"]}
{"window":5,"key":"ü","load":4}
{"window":7,"tasks":["t9"]}
`
	ws, err := readAll(t, trace)
	if err != nil {
		t.Fatal(err)
	}
	want := []Window{
		{Number: 0, Tasks: []string{"t0", "t1"}, Keys: []KeyLoad{{Key: "user:1", Load: 2.5}, {Key: "user:2", Load: 0}, {Key: "user:1", Load: 1}}},
		{Number: 3, Tasks: []string{"t0", "t1"}, Keys: []KeyLoad{{Key: "user:3", Load: 1000}}},
		{Number: 5, Tasks: []string{"t1", "t2", "T3:x"}, Keys: []KeyLoad{{Key: "ü", Load: 4}}},
		{Number: 7, Tasks: []string{"t9"}},
	}
	if len(ws) != len(want) {
		t.Fatalf("got %d windows, want %d", len(ws), len(want))
	}
	for i, w := range ws {
		if i == 0 && (w.FirstLine != 1 || w.LastLine != 5) {
			t.Errorf("window 0 spans lines %d to %d, want 1 to 5", w.FirstLine, w.LastLine)
		}
		if w.Number != want[i].Number || !slices.Equal(w.Tasks, want[i].Tasks) || !slices.Equal(w.Keys, want[i].Keys) {
			t.Errorf("window %d = %+v, want %+v", i, *w, want[i])
		}
	}
	// Equal keys merge into one entry of width one.
	load, err := ws[0].Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(load) != 2 || load.Total() != 3.5 {
		t.Fatalf("load = %+v, want two entries totalling 3.5", load)
	}
	k := assign.HashString("user:1")
	if got := load.In(k, k+1); got != 3.5 {
		t.Errorf("load of user:1 = %g, want 3.5", got)
	}
	if live := ws[2].LiveTasks(); live[2] != (assign.Task{Name: "T3:x", Addr: "T3:x"}) {
		t.Errorf("LiveTasks = %+v", live)
	}
}

func TestParseTraceRejects(t *testing.T) {
	long := `{"window":0,"key":"` + strings.Repeat("k", MaxLineLen) + `","load":1}`
	for _, tc := range []struct {
		name, trace string
		line        int
		msg         string
	}{
		{"not json", "nope", 1, "invalid character"},
		{"array", `[1]`, 1, "cannot unmarshal"},
		{"null", `null`, 1, `missing "window"`},
		{"unknown field", `{"window":0,"tasks":["a"],"extra":1}`, 1, `unknown field "extra"`},
		{"trailing data", `{"window":0,"tasks":["a"]} {}`, 1, "after the JSON object"},
		{"no window", `{"tasks":["a"]}`, 1, `missing "window"`},
		{"negative window", `{"window":-1,"tasks":["a"]}`, 1, "not a non-negative integer"},
		{"fractional window", `{"window":1.5,"tasks":["a"]}`, 1, "not a non-negative integer"},
		{"string window", `{"window":"1","tasks":["a"]}`, 1, "window"},
		{"decreasing window", "{\"window\":2,\"tasks\":[\"a\"]}\n{\"window\":1,\"key\":\"k\",\"load\":1}", 2, "windows must not decrease"},
		{"load before tasks", `{"window":0,"key":"k","load":1}`, 1, "before any tasks line"},
		{"empty tasks", `{"window":0,"tasks":[]}`, 1, "at least one live task"},
		{"bad task name", `{"window":0,"tasks":["a","-b"]}`, 1, "task 1"},
		{"duplicate task", `{"window":0,"tasks":["a","b","a"]}`, 1, `"a" is listed twice`},
		{"two tasks lines", "{\"window\":0,\"tasks\":[\"a\"]}\n\n{\"window\":0,\"tasks\":[\"b\"]}", 3, "already has a tasks line (line 1)"},
		{"tasks after load", "{\"window\":0,\"tasks\":[\"a\"]}\n{\"window\":1,\"key\":\"k\",\"load\":1}\n{\"window\":1,\"tasks\":[\"b\"]}", 3, "after that window's load lines"},
		{"tasks with key", `{"window":0,"tasks":["a"],"key":"k"}`, 1, `no "key", "load" or "bytes"`},
		{"empty key", "{\"window\":0,\"tasks\":[\"a\"]}\n{\"window\":0,\"key\":\"\",\"load\":1}", 2, "empty key"},
		{"no load", "{\"window\":0,\"tasks\":[\"a\"]}\n{\"window\":0,\"key\":\"k\"}", 2, `has no "load"`},
		{"load without key", "{\"window\":0,\"tasks\":[\"a\"]}\n{\"window\":0,\"load\":1}", 2, `no "key"`},
		{"negative load", "{\"window\":0,\"tasks\":[\"a\"]}\n{\"window\":0,\"key\":\"k\",\"load\":-1}", 2, "negative"},
		{"huge load", "{\"window\":0,\"tasks\":[\"a\"]}\n{\"window\":0,\"key\":\"k\",\"load\":1e300}", 2, "above the limit"},
		{"neither", `{"window":0}`, 1, `neither "tasks" nor "key"`},
		{"line too long", "{\"window\":0,\"tasks\":[\"a\"]}\n" + long, 2, "longer than"},
		{"capacities not one per task", `{"window":0,"tasks":["a","b"],"capacity":[1]}`, 1, "1 capacities for 2 tasks"},
		{"negative capacity", `{"window":0,"tasks":["a","b"],"capacity":[1,-2]}`, 1, `task "b": assign: invalid task capacity: -2`},
		{"huge capacity", `{"window":0,"tasks":["a"],"capacity":[1e9]}`, 1, "between 0.001 and 1000"},
		{"capacity without tasks", `{"window":0,"capacity":[1]}`, 1, `"capacity" or "memory" without "tasks"`},
		{"memory not one per task", `{"window":0,"tasks":["a","b"],"memory":[1e6]}`, 1, "1 memory limits for 2 tasks"},
		{"fractional memory", `{"window":0,"tasks":["a"],"memory":[0.5]}`, 1, `task "a": assign: invalid task memory limit: 0.5`},
		{"memory on a load line", "{\"window\":0,\"tasks\":[\"a\"]}\n{\"window\":0,\"key\":\"k\",\"load\":1,\"memory\":[1]}", 2, `load line has no "capacity" or "memory"`},
		{"negative bytes", "{\"window\":0,\"tasks\":[\"a\"]}\n{\"window\":0,\"key\":\"k\",\"load\":1,\"bytes\":-1}", 2, `key "k": assign: invalid load: bytes -1 is negative`},
		{"huge bytes", "{\"window\":0,\"tasks\":[\"a\"]}\n{\"window\":0,\"key\":\"k\",\"load\":1,\"bytes\":1e300}", 2, `above the limit`},
		{"bytes on a tasks line", `{"window":0,"tasks":["a"],"bytes":3}`, 1, `no "key", "load" or "bytes"`},
		{"bytes without key", `{"window":0,"bytes":3}`, 1, `load line has no "key"`},
		{"capacity on a load line", "{\"window\":0,\"tasks\":[\"a\"]}\n{\"window\":0,\"key\":\"k\",\"load\":1,\"capacity\":[1]}", 2, `load line has no "capacity"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readAll(t, tc.trace)
			var te *TraceError
			if !errors.As(err, &te) || !errors.Is(err, ErrInvalidTrace) {
				t.Fatalf("err = %v, want a *TraceError", err)
			}
			if te.Line != tc.line {
				t.Errorf("line = %d, want %d (%v)", te.Line, tc.line, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %q, want it to mention %q", err, tc.msg)
			}
		})
	}
}

func TestLoadLimitAfterMerging(t *testing.T) {
	ws, err := readAll(t, "{\"window\":0,\"tasks\":[\"a\"]}\n{\"window\":0,\"key\":\"k\",\"load\":1e15}\n{\"window\":0,\"key\":\"k\",\"load\":1e15}\n")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ws[0].Load()
	var te *TraceError
	if !errors.Is(err, assign.ErrInvalidLoad) || !errors.As(err, &te) || te.Line != 3 || !strings.Contains(err.Error(), "lines 1 to 3") {
		t.Fatalf("Load = %v, want a TraceError at line 3 wrapping ErrInvalidLoad", err)
	}
}

// FuzzParseTrace checks that no input panics, every error names a line
// that exists, and whatever parses obeys the trace rules.
func FuzzParseTrace(f *testing.F) {
	f.Add([]byte("{\"window\":0,\"tasks\":[\"t0\",\"t1\"]}\n{\"window\":0,\"key\":\"a\",\"load\":1}\n"))
	f.Add([]byte("{\"window\":0,\"tasks\":[\"t0\"]}\n{\"window\":2,\"tasks\":[\"t1\"]}\n{\"window\":2,\"key\":\"a\",\"load\":0.5}\n"))
	f.Add([]byte(`{"window":1,"key":"a","load":1}`))
	f.Add([]byte(`{"window":-1}`))
	f.Add([]byte("\n\n{}\n"))
	if b, err := os.ReadFile("testdata/diurnal.jsonl"); err == nil {
		f.Add(b[:min(len(b), 4096)])
	}
	f.Add([]byte(`{"window":01,"key":"a","load":1}` + "\n" + `{"window":1,"key":"a\"b","load":+1}` + "\n" + `{"window":1,"key":"a","load":1.}`))
	f.Add([]byte(`{"window":1,"key":"","load":-0}` + "\n" + `{"window":1,"key":"x","load":1e400}` + "\n" + `{"window":99999999999999999999,"key":"x","load":1E+2}`))
	f.Add([]byte("{\"window\":0,\"tasks\":[\"t0\"],\"memory\":[1e6]}\n{\"window\":0,\"key\":\"a\",\"load\":1,\"bytes\":4096}\n{\"window\":0,\"key\":\"b\",\"load\":1,\"bytes\":1,\"bytes\":2}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fast path agrees with encoding/json wherever it answers.
		for _, line := range bytes.Split(data, []byte("\n")) {
			line = bytes.TrimSpace(line)
			fast, ok := decodeLoadLineFast(line)
			if !ok {
				continue
			}
			slow, err := decodeLineJSON(line)
			if err != nil {
				t.Fatalf("fast path accepted %q, encoding/json says %v", line, err)
			}
			if slow.Tasks != nil || slow.Window == nil || slow.Key == nil || slow.Load == nil ||
				string(*slow.Window) != string(*fast.Window) || *slow.Key != *fast.Key ||
				math.Float64bits(*slow.Load) != math.Float64bits(*fast.Load) ||
				(slow.Bytes == nil) != (fast.Bytes == nil) ||
				slow.Bytes != nil && math.Float64bits(*slow.Bytes) != math.Float64bits(*fast.Bytes) {
				t.Fatalf("%q: fast path read %s %q %v, encoding/json %+v", line, *fast.Window, *fast.Key, *fast.Load, slow)
			}
		}
		lines := bytes.Count(data, []byte("\n")) + 1
		ws, err := readAll(t, string(data))
		if err != nil {
			var te *TraceError
			if !errors.As(err, &te) {
				t.Fatalf("error is not a *TraceError: %v", err)
			}
			if te.Line < 1 || te.Line > lines {
				t.Fatalf("error names line %d of %d: %v", te.Line, lines, err)
			}
		}
		for i, w := range ws {
			if i > 0 && w.Number <= ws[i-1].Number {
				t.Fatalf("window %d follows window %d", w.Number, ws[i-1].Number)
			}
			if len(w.Tasks) == 0 && len(w.Keys) > 0 {
				t.Fatalf("window %d has load but no tasks", w.Number)
			}
			for _, name := range w.Tasks {
				if assign.ValidateTaskName(name) != nil {
					t.Fatalf("invalid task %q accepted", name)
				}
			}
			for _, kl := range w.Keys {
				if kl.Key == "" || assign.ValidateLoadValue(kl.Load) != nil || assign.ValidateBytesValue(kl.Bytes) != nil {
					t.Fatalf("bad key load %+v accepted", kl)
				}
			}
		}
	})
}

func BenchmarkParseTrace(b *testing.B) {
	data, err := os.ReadFile("testdata/power-law.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r := NewReader(bytes.NewReader(data))
		for {
			_, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// TestTraceCapacity: a tasks line may give each task's capacity; it stays
// in force with the task set, and LiveTasks carries it.
func TestTraceCapacity(t *testing.T) {
	ws, err := readAll(t, strings.Join([]string{
		`{"window":0,"tasks":["a","b"],"capacity":[1,2.5]}`,
		`{"window":0,"key":"k","load":1}`,
		`{"window":1,"key":"k","load":1}`,
		`{"window":2,"tasks":["a","b"]}`,
	}, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := [][]float64{{1, 2.5}, {1, 2.5}, {0, 0}}
	for i, w := range ws {
		live := w.LiveTasks()
		for j, task := range live {
			if task.Capacity != want[i][j] {
				t.Errorf("window %d: %s has capacity %v, want %v", w.Number, task.Name, task.Capacity, want[i][j])
			}
		}
	}
}
