package storage_test

import (
	"errors"
	"testing"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/storagetest"
)

func FuzzDecodeConfig(f *testing.F) {
	for _, s := range []string{
		`{"min_redundancy":1,"max_redundancy":1}`,
		`{"min_redundancy":2,"max_redundancy":64,"future":true}`,
		`{"min_redundancy":0,"max_redundancy":1}`,
		`{"min_redundancy":1,"max_redundancy":65}`,
		`{"min_redundancy":1e3}`,
		`{}`, `null`, `[]`, `"x"`, ``, `{"min_redundancy":1,"max_redundancy":1} trailing`,
		`{"min_redundancy":-1,"max_redundancy":9223372036854775808}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := storage.DecodeConfig(b)
		if err != nil {
			if !cfg.Equal(assign.Config{}) {
				t.Fatalf("error %v with a non-zero config %+v", err, cfg)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("decoded an invalid config %+v: %v", cfg, err)
		}
		enc, err := storage.EncodeConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		again, err := storage.DecodeConfig(enc)
		if err != nil || !again.Equal(cfg) {
			t.Fatalf("round trip of %+v: %+v, %v", cfg, again, err)
		}
	})
}

// FuzzDecodeRecord feeds arbitrary stored values to DecodeRecord, the code
// both stores' Load and Commit use to read a job's record (Bolt through
// the decoder it wraps): it must never panic, and it either fails as
// corrupt (or not found) or returns a record whose parts are valid and
// consistent.
func FuzzDecodeRecord(f *testing.F) {
	enc := func(gen uint64, tasks int) []byte {
		b, err := storagetest.Assignment("j", gen, tasks, 2).MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	cfg := []byte(`{"min_redundancy":1,"max_redundancy":2}`)
	f.Add(true, true, true, enc(2, 3), enc(1, 2), cfg)
	f.Add(true, false, false, enc(1, 1), []byte(nil), []byte(nil))
	f.Add(false, false, true, []byte(nil), []byte(nil), cfg)
	f.Add(true, true, false, enc(1, 2), enc(2, 3), []byte(nil))
	f.Add(false, true, false, []byte(nil), enc(1, 1), []byte(nil))
	f.Add(true, false, false, enc(1, 1)[:7], []byte(nil), []byte(nil))
	// Codec version 1 (no incarnation) beside version 2, as in a store
	// upgraded from format 1; and assignments of two incarnations.
	f.Add(true, true, false, enc(2, 3), storagetest.EncodeV1(f, storagetest.Assignment("j", 1, 2, 2)), []byte(nil))
	of := func(inc string, gen uint64) []byte {
		a := storagetest.Assignment("j", gen, 2, 2)
		a.Incarnation = inc
		b, err := a.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(true, true, false, of(fuzzIncarnation, 2), of("other", 1), []byte(nil))
	f.Fuzz(func(t *testing.T, hasCur, hasPrev, hasCfg bool, cur, prev, cfgb []byte) {
		// Stored values are never nil when present (bbolt returns a
		// non-nil empty slice for an empty value).
		present := func(ok bool, b []byte) []byte {
			if !ok {
				return nil
			}
			if b == nil {
				return []byte{}
			}
			return b
		}
		rec, err := storage.DecodeRecord("j", present(hasCur, cur), present(hasPrev, prev), present(hasCfg, cfgb))
		if err != nil {
			if !errors.Is(err, storage.ErrNotFound) && !errors.Is(err, storage.ErrCorrupt) {
				t.Fatalf("error is neither not-found nor corrupt: %v", err)
			}
			if errors.Is(err, storage.ErrNotFound) && (hasCur || hasCfg) {
				t.Fatalf("not found with values present: %v", err)
			}
			return
		}
		if rec.Job != "j" || (rec.Current == nil) == hasCur || rec.Configured != hasCfg || (rec.Previous == nil) == hasPrev {
			t.Fatalf("record does not match what is stored: %+v", rec)
		}
		if err := rec.Config.Validate(); err != nil {
			t.Fatal(err)
		}
		for _, a := range []*assign.Assignment{rec.Current, rec.Previous} {
			if a == nil {
				continue
			}
			if err := a.Validate(); err != nil || a.Job != "j" {
				t.Fatalf("decoded an invalid assignment: %v", err)
			}
		}
		if rec.Previous != nil && rec.Previous.Generation >= rec.Current.Generation {
			t.Fatalf("previous generation %d not below current %d", rec.Previous.Generation, rec.Current.Generation)
		}
		// A store stamps its incarnation on what it loads, and refuses an
		// assignment of another.
		foreign := false
		for _, a := range []*assign.Assignment{rec.Current, rec.Previous} {
			foreign = foreign || a != nil && a.Incarnation != "" && a.Incarnation != fuzzIncarnation
		}
		err = storage.StampRecord(&rec, fuzzIncarnation)
		if foreign != (err != nil) || err != nil && !errors.Is(err, storage.ErrCorrupt) {
			t.Fatalf("StampRecord of a record with a foreign incarnation (%v): %v", foreign, err)
		}
		for _, a := range []*assign.Assignment{rec.Current, rec.Previous} {
			if err == nil && a != nil && a.Incarnation != fuzzIncarnation {
				t.Fatalf("StampRecord left incarnation %q", a.Incarnation)
			}
		}
	})
}

// fuzzIncarnation is the incarnation of the store FuzzDecodeRecord reads
// for.
const fuzzIncarnation = "0123456789abcdef0123456789abcdef"

func FuzzDecodeFormatVersion(f *testing.F) {
	f.Add(storage.EncodeFormatVersion(storage.FormatVersion))
	f.Add([]byte{})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := storage.DecodeFormatVersion(b)
		if err != nil {
			return
		}
		if string(storage.EncodeFormatVersion(v)) != string(b) {
			t.Fatalf("%x decoded to %d, which encodes differently", b, v)
		}
	})
}

func FuzzDecodeIncarnation(f *testing.F) {
	f.Add([]byte(storage.NewIncarnation()))
	f.Add([]byte{})
	f.Add([]byte("a b"))
	f.Fuzz(func(t *testing.T, b []byte) {
		inc, err := storage.DecodeIncarnation(b)
		if err != nil {
			return
		}
		if inc != string(b) {
			t.Fatalf("decoded %q as %q", b, inc)
		}
		if err := assign.ValidateIncarnation(inc); err != nil {
			t.Fatalf("decoded an invalid incarnation %q: %v", inc, err)
		}
	})
}

func FuzzDecodeGeneration(f *testing.F) {
	f.Add(storage.EncodeGeneration(0))
	f.Add(storage.EncodeGeneration(1 << 62))
	f.Add([]byte{})
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := storage.DecodeGeneration(b)
		if err != nil {
			if len(b) == 8 {
				t.Fatalf("8 bytes %x did not decode: %v", b, err)
			}
			return
		}
		if string(storage.EncodeGeneration(g)) != string(b) {
			t.Fatalf("%x decoded to %d, which encodes differently", b, g)
		}
	})
}
