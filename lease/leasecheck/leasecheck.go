// Package leasecheck records the requests a strongly consistent job's tasks
// served and checks the history for what strong consistency forbids: an
// instant at which two tasks both believed they owned a key, and a fencing
// token that went backwards for a key.
//
// Every request is recorded as (task, key, token, start, end) on one
// machine's monotonic clock: start before the task took its handle on the
// key, end after the handle said the key had stayed the task's
// throughout (slicelet.Handle.IsAssignedContinuously). Only such
// satisfied requests are recorded; a request whose handle reported a
// break is not, since the task did not act on it. The end-to-end tests and
// the consistency benchmark use it.
package leasecheck

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Op is one satisfied request.
type Op struct {
	Task  string
	Key   string
	Token uint64
	// Start and End are on the recording machine's monotonic clock
	// (Recorder.Now), Start <= End.
	Start, End time.Duration
}

// Recorder collects Ops from many goroutines. Its clock is the monotonic
// time since it was created.
type Recorder struct {
	base time.Time
	mu   sync.Mutex
	ops  []Op
}

// NewRecorder returns an empty Recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{base: time.Now()} }

// Now is the Recorder's clock.
func (r *Recorder) Now() time.Duration { return time.Since(r.base) }

// Add records a satisfied request.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Ops returns a copy of what was recorded.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// Len is how many requests were recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Violation is one breach of strong consistency.
type Violation struct {
	Kind string // "double owner" or "token regression"
	A, B Op
}

func (v Violation) String() string {
	return fmt.Sprintf("%s on key %q: %s token %d [%v, %v] and %s token %d [%v, %v]", v.Kind, v.A.Key,
		v.A.Task, v.A.Token, v.A.Start, v.A.End, v.B.Task, v.B.Token, v.B.Start, v.B.End)
}

// Report is what Check found.
type Report struct {
	Ops, Keys       int
	DoubleOwners    int
	TokenRegression int
	// Examples holds up to 10 violations of each kind.
	Examples []Violation
}

// OK reports whether the history has no violation.
func (r Report) OK() bool { return r.DoubleOwners == 0 && r.TokenRegression == 0 }

func (r Report) String() string {
	return fmt.Sprintf("%d requests on %d keys: %d double owners, %d token regressions", r.Ops, r.Keys, r.DoubleOwners, r.TokenRegression)
}

// Check examines a history. Two requests of different tasks on one key
// whose spans overlap are a double owner: both tasks believed they owned
// the key at the same instant. A request that started after another on
// the same key had ended, with a lower token, is a token regression: a
// store that refuses lower tokens would have refused it.
func Check(ops []Op) Report {
	byKey := make(map[string][]Op)
	for _, op := range ops {
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	rep := Report{Ops: len(ops), Keys: len(byKey)}
	var doubles, regressions int
	note := func(kind string, a, b Op) {
		if kind == "double owner" {
			rep.DoubleOwners++
			doubles++
			if doubles > 10 {
				return
			}
		} else {
			rep.TokenRegression++
			regressions++
			if regressions > 10 {
				return
			}
		}
		rep.Examples = append(rep.Examples, Violation{Kind: kind, A: a, B: b})
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		kops := byKey[k]
		slices.SortFunc(kops, func(a, b Op) int {
			return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.End, b.End))
		})
		// active: requests not yet ended at the current start. ended:
		// by end time, for the highest token of those that have ended.
		var active []Op
		byEnd := slices.Clone(kops)
		slices.SortFunc(byEnd, func(a, b Op) int { return cmp.Compare(a.End, b.End) })
		e := 0
		var maxEnded Op
		haveEnded := false
		for _, op := range kops {
			for e < len(byEnd) && byEnd[e].End < op.Start {
				if !haveEnded || byEnd[e].Token > maxEnded.Token {
					maxEnded, haveEnded = byEnd[e], true
				}
				e++
			}
			if haveEnded && op.Token < maxEnded.Token {
				note("token regression", maxEnded, op)
			}
			kept := active[:0]
			for _, a := range active {
				if a.End >= op.Start {
					kept = append(kept, a)
				}
			}
			active = kept
			for _, a := range active {
				if a.Task != op.Task {
					note("double owner", a, op)
					break
				}
			}
			active = append(active, op)
		}
	}
	return rep
}

// AppendRecord appends op to b as one line of a record file, the form a
// process that serves a strong job writes its satisfied requests in so
// that another process can check them: "task token start end key", start
// and end in nanoseconds of the machine's CLOCK_MONOTONIC (which every
// process shares), the key last so that it may hold spaces.
func AppendRecord(b []byte, op Op) []byte {
	return fmt.Appendf(b, "%s %d %d %d %s\n", op.Task, op.Token, int64(op.Start), int64(op.End), op.Key)
}

// ReadRecords reads the record files matching pattern (filepath.Glob). A
// line that does not parse, such as the last one of a writer killed
// mid-line, is skipped: the history then lacks that request, which makes
// the check weaker, never wrong.
func ReadRecords(pattern string) ([]Op, error) {
	files, err := filepath.Glob(pattern)
	if err != nil {
		return nil, err
	}
	var ops []Op
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if op, ok := parseRecord(sc.Text()); ok {
				ops = append(ops, op)
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("leasecheck: read %s: %w", name, err)
		}
	}
	return ops, nil
}

func parseRecord(line string) (Op, bool) {
	f := strings.SplitN(line, " ", 5)
	if len(f) != 5 || f[0] == "" {
		return Op{}, false
	}
	token, err1 := strconv.ParseUint(f[1], 10, 64)
	start, err2 := strconv.ParseInt(f[2], 10, 64)
	end, err3 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || end < start {
		return Op{}, false
	}
	return Op{Task: f[0], Key: f[4], Token: token, Start: time.Duration(start), End: time.Duration(end)}, true
}
