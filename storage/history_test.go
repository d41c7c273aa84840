package storage

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
)

// NewHistoryEntry counts every move by phase, keeps the ownership moves
// in order up to MaxHistoryMoves and counts the rest.
func TestNewHistoryEntry(t *testing.T) {
	var moves []assign.Move
	moves = append(moves, assign.Move{Kind: assign.Reassign, Start: 0, End: 10, From: "a", To: "b", Reason: "left", Phase: assign.PhaseDeparted})
	for i := range MaxHistoryMoves + 5 {
		moves = append(moves, assign.Move{Kind: assign.Split, Start: assign.SliceKey(i), End: assign.SliceKey(i + 1), Phase: assign.PhaseSplit})
		moves = append(moves, assign.Move{Kind: assign.AddReplica, Start: assign.SliceKey(i), End: assign.SliceKey(i + 1), To: "c", Phase: assign.PhaseMove})
	}
	e := NewHistoryEntry(assign.Decision{Changed: true, Churn: 0.25, Moves: moves})
	if e.Churn != 0.25 || len(e.Moves) != MaxHistoryMoves || e.MovesOmitted != 6 {
		t.Fatalf("entry keeps %d moves and omits %d (churn %v); want %d and 6", len(e.Moves), e.MovesOmitted, e.Churn, MaxHistoryMoves)
	}
	if e.Moves[0].Kind != "reassign" || e.Moves[0].From != "a" || e.Moves[1].Kind != "add-replica" {
		t.Errorf("moves not in order: %+v", e.Moves[:2])
	}
	want := []PhaseMoves{{assign.PhaseDeparted, 1}, {assign.PhaseSplit, MaxHistoryMoves + 5}, {assign.PhaseMove, MaxHistoryMoves + 5}}
	if !reflect.DeepEqual(e.Phases, want) {
		t.Errorf("phases = %v, want %v", e.Phases, want)
	}
	if _, err := EncodeHistoryEntry(e); err != nil {
		t.Error(err)
	}
}

func TestHistoryEntryBounds(t *testing.T) {
	ok := HistoryEntry{Generation: 3, Time: time.Unix(10, 0).UTC(), Cause: CauseLoad, Churn: 0.1, ImbalanceBefore: 1.3, ImbalanceAfter: 1.1,
		Moves: []HistoryMove{{Kind: "reassign", Start: 1, End: 2, From: "a", To: "b"}}}
	b, err := EncodeHistoryEntry(ok)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeHistoryEntry(b)
	if err != nil || !reflect.DeepEqual(got, ok) {
		t.Fatalf("round trip = %+v, %v; want %+v", got, err, ok)
	}
	for name, bad := range map[string]func(*HistoryEntry){
		"empty move":        func(e *HistoryEntry) { e.Moves[0].End = e.Moves[0].Start },
		"move past the end": func(e *HistoryEntry) { e.Moves[0].End = assign.KeySpaceEnd + 1 },
		"long text":         func(e *HistoryEntry) { e.Detail = string(make([]byte, maxHistoryText+1)) },
		"too many moves":    func(e *HistoryEntry) { e.Moves = make([]HistoryMove, MaxHistoryMoves+1) },
	} {
		e := ok
		e.Moves = append([]HistoryMove(nil), ok.Moves...)
		bad(&e)
		if _, err := EncodeHistoryEntry(e); err == nil {
			t.Errorf("%s: encoded", name)
		}
		raw, _ := json.Marshal(e)
		if _, err := DecodeHistoryEntry(raw); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// FuzzDecodeHistoryEntry: any stored bytes decode or fail cleanly, and
// what decodes encodes again to an equal entry.
func FuzzDecodeHistoryEntry(f *testing.F) {
	b, _ := EncodeHistoryEntry(HistoryEntry{Generation: 7, Cause: CauseTaskFailed, Detail: "task a failed",
		Phases: []PhaseMoves{{Phase: "departed", Moves: 2}}, Moves: []HistoryMove{{Kind: "reassign", Start: 0, End: 5, From: "a", To: "b"}}})
	f.Add(b)
	f.Add([]byte(`{"moves":[{"start":5,"end":1}]}`))
	f.Add([]byte(`{"churn":1e999}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeHistoryEntry(data)
		if err != nil {
			return
		}
		again, err := EncodeHistoryEntry(e)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", e, err)
		}
		e2, err := DecodeHistoryEntry(again)
		if err != nil {
			t.Fatalf("%s does not decode again: %v", again, err)
		}
		if third, _ := EncodeHistoryEntry(e2); !bytes.Equal(third, again) {
			t.Fatalf("round trip changed %s into %s", again, third)
		}
	})
}
