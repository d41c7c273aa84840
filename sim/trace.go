package sim

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/slicerd/slicerd/assign"
)

// Sentinel errors. Callers match them with errors.Is.
var (
	// ErrInvalidTrace marks a trace that cannot be replayed; the wrapped
	// *TraceError says on which line and why.
	ErrInvalidTrace = errors.New("sim: invalid trace")
	// ErrInvalidConfig marks a replay or generator configuration that
	// cannot be used.
	ErrInvalidConfig = errors.New("sim: invalid configuration")
	// ErrAlgorithm marks an algorithm that failed or returned an
	// assignment that does not validate.
	ErrAlgorithm = errors.New("sim: algorithm failed")
)

// MaxLineLen bounds one trace line, so a corrupt file cannot make the
// parser buffer without limit.
const MaxLineLen = 1 << 20

// lineFormat is the help every syntax error carries.
const lineFormat = `a line is {"window":W,"tasks":["t0",...]} (optionally with "capacity":[C0,...] and "memory":[M0,...]) or {"window":W,"key":"K","load":L} (optionally with "bytes":B)`

// TraceError is a problem at one line of a trace.
type TraceError struct {
	Line int
	Err  error
}

func (e *TraceError) Error() string {
	return fmt.Sprintf("sim: trace line %d: %v", e.Line, e.Err)
}

// Unwrap lets errors.Is match both ErrInvalidTrace and the cause (for
// example assign.ErrInvalidLoad).
func (e *TraceError) Unwrap() []error { return []error{ErrInvalidTrace, e.Err} }

// Record is one line of a trace: either a tasks line (Tasks non-nil), which
// sets the live tasks from Window on, or a load line, which says Key
// generated Load units of load in Window.
type Record struct {
	Line   int
	Window uint64
	Tasks  []string
	// Capacity, on a tasks line, is each task's relative capacity,
	// parallel to Tasks; nil when the line gives none (every task 1).
	Capacity []float64
	// Memory, on a tasks line, is each task's memory limit in bytes (0:
	// none), parallel to Tasks; nil when the line gives none.
	Memory []float64
	Key    string
	Load   float64
	// Bytes, on a load line with HasBytes, is the state Key holds from
	// Window on, in bytes, until a later line says otherwise.
	Bytes    float64
	HasBytes bool
}

// IsTasks reports whether r is a tasks line.
func (r *Record) IsTasks() bool { return r.Tasks != nil }

// KeyLoad is the load one application key generated in a window and,
// with HasBytes, the state it holds from then on.
type KeyLoad struct {
	Key      string
	Load     float64
	Bytes    float64
	HasBytes bool
}

// Window is everything a trace says about one measurement window.
type Window struct {
	Number uint64
	// Tasks are the live task names, from this window's tasks line or the
	// latest one before it, in trace order.
	Tasks []string
	// Capacity is each task's relative capacity, parallel to Tasks, or
	// nil when the tasks line gave none.
	Capacity []float64
	// Memory is each task's memory limit in bytes (0: none), parallel to
	// Tasks, or nil when the tasks line gave none.
	Memory []float64
	// Keys are the window's load lines in trace order; a key may repeat,
	// and its loads then add up.
	Keys []KeyLoad
	// FirstLine and LastLine are where the window's lines are in the trace.
	FirstLine, LastLine int
}

// LiveTasks returns the window's tasks as the assignment model names them;
// in a simulation a task's address is its name.
func (w *Window) LiveTasks() []assign.Task {
	tasks := make([]assign.Task, len(w.Tasks))
	for i, name := range w.Tasks {
		tasks[i] = assign.Task{Name: name, Addr: name}
		if w.Capacity != nil {
			tasks[i].Capacity = w.Capacity[i]
		}
		if w.Memory != nil {
			tasks[i].MemoryLimit = w.Memory[i]
		}
	}
	return tasks
}

// Load returns the window's load as Slicelets would report it: one entry of
// width one per slice key, sorted, loads of equal slice keys added up.
func (w *Window) Load() (assign.Load, error) {
	byKey := make(map[assign.SliceKey]float64, len(w.Keys))
	for _, kl := range w.Keys {
		byKey[assign.HashString(kl.Key)] += kl.Load
	}
	load := make(assign.Load, 0, len(byKey))
	for k, v := range byKey {
		load = append(load, assign.LoadEntry{Start: k, End: k + 1, Load: v})
	}
	slices.SortFunc(load, func(a, b assign.LoadEntry) int { return cmp.Compare(a.Start, b.Start) })
	if err := load.Validate(); err != nil {
		return nil, &TraceError{Line: w.LastLine, Err: fmt.Errorf("window %d (lines %d to %d): %w; keep the load of each key in a window at most %g",
			w.Number, w.FirstLine, w.LastLine, err, assign.MaxLoad)}
	}
	return load, nil
}

// Reader parses a trace one line at a time, checking each line as it goes:
// memory stays bounded by one line and, for ReadWindow, one window.
type Reader struct {
	sc   *bufio.Scanner
	line int

	started   bool
	window    uint64
	tasksLine int // line of the current window's tasks line, 0 if none
	loadSeen  bool
	everTasks bool
	live      []string  // tasks in force for the window ReadWindow builds
	liveCap   []float64 // and their capacities
	liveMem   []float64 // and memory limits
	pending   *Record
	err       error // sticky: ReadWindow stops at the first bad line
}

// NewReader returns a Reader of the trace in r.
func NewReader(r io.Reader) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), MaxLineLen)
	return &Reader{sc: sc}
}

// traceLine is the JSON shape of a line. Pointers tell absent from zero.
type traceLine struct {
	Window   *json.RawMessage `json:"window"`
	Tasks    *[]string        `json:"tasks"`
	Capacity *[]float64       `json:"capacity"`
	Memory   *[]float64       `json:"memory"`
	Key      *string          `json:"key"`
	Load     *float64         `json:"load"`
	Bytes    *float64         `json:"bytes"`
}

// Next returns the next record, or io.EOF after the last one. Any other
// error is a *TraceError wrapping ErrInvalidTrace (or the reader's error).
func (r *Reader) Next() (Record, error) {
	for {
		if !r.sc.Scan() {
			err := r.sc.Err()
			if err == nil {
				return Record{}, io.EOF
			}
			if errors.Is(err, bufio.ErrTooLong) {
				return Record{}, r.fail(r.line+1, fmt.Errorf("line is longer than %d bytes; split the trace into more lines", MaxLineLen))
			}
			return Record{}, fmt.Errorf("sim: reading trace after line %d: %w", r.line, err)
		}
		r.line++
		b := bytes.TrimSpace(r.sc.Bytes())
		if len(b) == 0 {
			continue
		}
		return r.parse(b)
	}
}

func (r *Reader) fail(line int, err error) error {
	return &TraceError{Line: line, Err: err}
}

func (r *Reader) parse(b []byte) (Record, error) {
	tl, ok := decodeLoadLineFast(b)
	if !ok {
		var err error
		if tl, err = decodeLineJSON(b); err != nil {
			return Record{}, r.fail(r.line, err)
		}
	}
	if tl.Window == nil {
		return Record{}, r.fail(r.line, fmt.Errorf("missing \"window\"; %s", lineFormat))
	}
	w, err := strconv.ParseUint(string(*tl.Window), 10, 64)
	if err != nil {
		return Record{}, r.fail(r.line, fmt.Errorf("window %s is not a non-negative integer", *tl.Window))
	}
	if r.started && w < r.window {
		return Record{}, r.fail(r.line, fmt.Errorf("window %d comes after window %d; windows must not decrease", w, r.window))
	}
	if !r.started || w > r.window {
		r.started, r.window, r.tasksLine, r.loadSeen = true, w, 0, false
	}
	rec := Record{Line: r.line, Window: w}
	switch {
	case tl.Tasks != nil:
		if tl.Key != nil || tl.Load != nil || tl.Bytes != nil {
			return Record{}, r.fail(r.line, fmt.Errorf("a tasks line has no \"key\", \"load\" or \"bytes\"; put them on lines of their own"))
		}
		if r.tasksLine != 0 {
			return Record{}, r.fail(r.line, fmt.Errorf("window %d already has a tasks line (line %d); give one task set per window", w, r.tasksLine))
		}
		if r.loadSeen {
			return Record{}, r.fail(r.line, fmt.Errorf("tasks line for window %d comes after that window's load lines; put it first", w))
		}
		tasks := *tl.Tasks
		if len(tasks) == 0 {
			return Record{}, r.fail(r.line, fmt.Errorf("empty task list; a window needs at least one live task"))
		}
		seen := make(map[string]struct{}, len(tasks))
		for i, name := range tasks {
			if err := assign.ValidateTaskName(name); err != nil {
				return Record{}, r.fail(r.line, fmt.Errorf("task %d: %w", i, err))
			}
			if _, dup := seen[name]; dup {
				return Record{}, r.fail(r.line, fmt.Errorf("task %q is listed twice; list each task once", name))
			}
			seen[name] = struct{}{}
		}
		if tl.Capacity != nil {
			caps := *tl.Capacity
			if len(caps) != len(tasks) {
				return Record{}, r.fail(r.line, fmt.Errorf("%d capacities for %d tasks; give one capacity per task, in the order of \"tasks\"", len(caps), len(tasks)))
			}
			for i, c := range caps {
				if err := assign.ValidateCapacity(c); err != nil {
					return Record{}, r.fail(r.line, fmt.Errorf("task %q: %w", tasks[i], err))
				}
			}
			rec.Capacity = caps
		}
		if tl.Memory != nil {
			mem := *tl.Memory
			if len(mem) != len(tasks) {
				return Record{}, r.fail(r.line, fmt.Errorf("%d memory limits for %d tasks; give one limit per task (0 for none), in the order of \"tasks\"", len(mem), len(tasks)))
			}
			for i, m := range mem {
				if err := assign.ValidateMemoryLimit(m); err != nil {
					return Record{}, r.fail(r.line, fmt.Errorf("task %q: %w", tasks[i], err))
				}
			}
			rec.Memory = mem
		}
		r.tasksLine, r.everTasks = r.line, true
		rec.Tasks = tasks
	case tl.Key != nil:
		if tl.Capacity != nil || tl.Memory != nil {
			return Record{}, r.fail(r.line, fmt.Errorf("a load line has no \"capacity\" or \"memory\"; give them on the tasks line"))
		}
		if *tl.Key == "" {
			return Record{}, r.fail(r.line, fmt.Errorf("empty key; name the application key that generated the load"))
		}
		if tl.Load == nil {
			return Record{}, r.fail(r.line, fmt.Errorf("key %q has no \"load\"", *tl.Key))
		}
		if err := assign.ValidateLoadValue(*tl.Load); err != nil {
			return Record{}, r.fail(r.line, fmt.Errorf("key %q: %w", *tl.Key, err))
		}
		if !r.everTasks {
			return Record{}, r.fail(r.line, fmt.Errorf("load line before any tasks line; start the trace with {\"window\":%d,\"tasks\":[...]}", w))
		}
		if tl.Bytes != nil {
			if err := assign.ValidateBytesValue(*tl.Bytes); err != nil {
				return Record{}, r.fail(r.line, fmt.Errorf("key %q: %w", *tl.Key, err))
			}
			rec.Bytes, rec.HasBytes = *tl.Bytes, true
		}
		r.loadSeen = true
		rec.Key, rec.Load = *tl.Key, *tl.Load
	case tl.Load != nil || tl.Bytes != nil:
		return Record{}, r.fail(r.line, fmt.Errorf("load line has no \"key\"; name the application key"))
	case tl.Capacity != nil || tl.Memory != nil:
		return Record{}, r.fail(r.line, fmt.Errorf("\"capacity\" or \"memory\" without \"tasks\"; give them on a tasks line, one per task"))
	default:
		return Record{}, r.fail(r.line, fmt.Errorf("line has neither \"tasks\" nor \"key\"; %s", lineFormat))
	}
	return rec, nil
}

// decodeLineJSON decodes one line with encoding/json, strictly.
func decodeLineJSON(b []byte) (traceLine, error) {
	var tl traceLine
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tl); err != nil {
		return tl, fmt.Errorf("%v; %s", err, lineFormat)
	}
	if _, err := dec.Token(); err != io.EOF {
		return tl, fmt.Errorf("unexpected data after the JSON object; put one object on each line")
	}
	return tl, nil
}

var (
	fastWindow = []byte(`{"window":`)
	fastKey    = []byte(`,"key":"`)
	fastLoad   = []byte(`","load":`)
	fastBytes  = []byte(`,"bytes":`)
)

// decodeLoadLineFast reads a load line written exactly as the generator
// writes it ({"window":N,"key":"K","load":X} or with ,"bytes":Y after X;
// no spaces, no escapes in K),
// which is most of any trace, several times faster than encoding/json. It
// reports false for anything else, which then takes the strict path; when
// it reports true the result is what decodeLineJSON would return.
func decodeLoadLineFast(b []byte) (traceLine, bool) {
	rest, ok := bytes.CutPrefix(b, fastWindow)
	if !ok {
		return traceLine{}, false
	}
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 || rest[0] == '0' && i > 1 {
		return traceLine{}, false
	}
	window := json.RawMessage(rest[:i])
	if rest, ok = bytes.CutPrefix(rest[i:], fastKey); !ok {
		return traceLine{}, false
	}
	j := 0
	for j < len(rest) && rest[j] >= 0x20 && rest[j] < 0x7f && rest[j] != '"' && rest[j] != '\\' {
		j++
	}
	key := string(rest[:j])
	if rest, ok = bytes.CutPrefix(rest[j:], fastLoad); !ok {
		return traceLine{}, false
	}
	if rest, ok = bytes.CutSuffix(rest, []byte("}")); !ok {
		return traceLine{}, false
	}
	var bytesField []byte
	if i := bytes.Index(rest, fastBytes); i >= 0 {
		rest, bytesField = rest[:i], rest[i+len(fastBytes):]
		if !isJSONNumber(bytesField) {
			return traceLine{}, false
		}
	}
	if !isJSONNumber(rest) {
		return traceLine{}, false
	}
	load, err := strconv.ParseFloat(string(rest), 64)
	if err != nil {
		return traceLine{}, false
	}
	tl := traceLine{Window: &window, Key: &key, Load: &load}
	if bytesField != nil {
		b, err := strconv.ParseFloat(string(bytesField), 64)
		if err != nil {
			return traceLine{}, false
		}
		tl.Bytes = &b
	}
	return tl, true
}

// isJSONNumber matches JSON's number grammar, which is stricter than
// strconv.ParseFloat's (no "+1", ".5", "Inf", hex or underscores).
func isJSONNumber(b []byte) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(b)
}

// ReadWindow returns the next window with its live tasks and load lines, or
// io.EOF after the last one. Windows the trace does not mention are
// skipped, not returned empty.
func (r *Reader) ReadWindow() (*Window, error) {
	var first Record
	switch {
	case r.err != nil:
		return nil, r.err
	case r.pending != nil:
		first, r.pending = *r.pending, nil
	default:
		rec, err := r.Next()
		if err != nil {
			if err != io.EOF {
				r.err = err
			}
			return nil, err
		}
		first = rec
	}
	w := &Window{Number: first.Window, FirstLine: first.Line}
	add := func(rec Record) {
		w.LastLine = rec.Line
		if rec.IsTasks() {
			r.live, r.liveCap, r.liveMem = rec.Tasks, rec.Capacity, rec.Memory
			return
		}
		w.Keys = append(w.Keys, KeyLoad{Key: rec.Key, Load: rec.Load, Bytes: rec.Bytes, HasBytes: rec.HasBytes})
	}
	add(first)
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			// A window cut short by a bad line is not simulated.
			r.err = err
			return nil, err
		}
		if rec.Window != w.Number {
			r.pending = &rec
			break
		}
		add(rec)
	}
	w.Tasks, w.Capacity, w.Memory = r.live, r.liveCap, r.liveMem
	return w, nil
}
