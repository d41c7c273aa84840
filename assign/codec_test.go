package assign

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// sampleAssignments covers the shapes the encoder sees: one task, many
// slices, redundancy, empty addresses.
func sampleAssignments(tb testing.TB) []*Assignment {
	tb.Helper()
	one, err := Initial("solo", []Task{{Name: "only"}}, DefaultConfig())
	if err != nil {
		tb.Fatal(err)
	}
	three, err := Initial("demo", namedTasks("a", "b", "c"), Config{MinRedundancy: 2, MaxRedundancy: 3})
	if err != nil {
		tb.Fatal(err)
	}
	joined, _, err := Rebalance(three, namedTasks("a", "b", "c", "d", "e"), Config{MinRedundancy: 2, MaxRedundancy: 3})
	if err != nil {
		tb.Fatal(err)
	}
	joined.Generation = 1 << 40
	joined.Incarnation = "0123456789abcdef0123456789abcdef"
	return []*Assignment{one, three, joined, twoSlices()}
}

// roundTrip encodes a and decodes the encoding, failing tb on an error.
func roundTrip(tb testing.TB, a *Assignment) (enc []byte, got *Assignment) {
	tb.Helper()
	enc, err := a.MarshalBinary()
	if err != nil {
		tb.Fatal(err)
	}
	if got, err = UnmarshalAssignment(enc); err != nil {
		tb.Fatal(err)
	}
	return enc, got
}

func TestCodecRoundTrip(t *testing.T) {
	for _, a := range sampleAssignments(t) {
		b, got := roundTrip(t, a)
		if !reflect.DeepEqual(got, a) {
			t.Fatalf("round trip changed the assignment:\n got %+v\nwant %+v", got, a)
		}
		var into Assignment
		if err := into.UnmarshalBinary(b); err != nil || !Equal(&into, a) || into.Generation != a.Generation {
			t.Fatalf("UnmarshalBinary: %v", err)
		}
	}
}

// encodeV1 encodes a in codec version 1, which has no incarnation, as a
// slicerd before incarnations wrote it.
func encodeV1(tb testing.TB, a *Assignment) []byte {
	tb.Helper()
	b, err := a.MarshalBinary()
	if err != nil {
		tb.Fatal(err)
	}
	d := decoder{b: b, off: len(codecMagic)}
	if v, err := d.uvarint("version"); err != nil || v != 2 {
		tb.Fatalf("encoding has version %d (%v), want 2", v, err)
	}
	head := d.off
	if _, err := d.str(label{"job", -1}, MaxJobNameLen); err != nil {
		tb.Fatal(err)
	}
	if _, err := d.uvarint("generation"); err != nil {
		tb.Fatal(err)
	}
	inc := d.off
	if _, err := d.str(label{"incarnation", -1}, MaxIncarnationLen); err != nil {
		tb.Fatal(err)
	}
	out := append([]byte(codecMagic), 1)
	out = append(out, b[head:inc]...)
	return append(out, b[d.off:]...)
}

func TestUnmarshalVersion1(t *testing.T) {
	for _, a := range sampleAssignments(t) {
		got, err := UnmarshalAssignment(encodeV1(t, a))
		if err != nil {
			t.Fatalf("version 1 encoding of job %q does not decode: %v", a.Job, err)
		}
		want := a.Clone()
		want.Incarnation = ""
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("version 1 decoded as\n%+v\nwant\n%+v", got, want)
		}
	}
}

func TestValidateIncarnation(t *testing.T) {
	a := twoSlices()
	for _, inc := range []string{"", "x", "0123456789abcdef0123456789abcdef", strings.Repeat("Z", MaxIncarnationLen)} {
		a.Incarnation = inc
		if err := a.Validate(); err != nil {
			t.Errorf("incarnation %q: %v", inc, err)
		}
	}
	for _, inc := range []string{"a b", "a/b", "é", strings.Repeat("z", MaxIncarnationLen+1)} {
		a.Incarnation = inc
		if err := a.Validate(); !errors.Is(err, ErrInvalidAssignment) {
			t.Errorf("incarnation %q: Validate = %v, want ErrInvalidAssignment", inc, err)
		}
		if _, err := a.MarshalBinary(); err == nil {
			t.Errorf("incarnation %q encodes", inc)
		}
	}
}

func TestMarshalRejectsInvalid(t *testing.T) {
	a := twoSlices()
	a.Generation = 0
	if _, err := a.MarshalBinary(); !errors.Is(err, ErrInvalidAssignment) {
		t.Fatalf("MarshalBinary(invalid) = %v", err)
	}
	a = twoSlices()
	a.Tasks[0].Addr = strings.Repeat("x", MaxTaskAddrLen+1)
	if _, err := a.MarshalBinary(); !errors.Is(err, ErrInvalidAddr) {
		t.Fatalf("MarshalBinary(long address) = %v", err)
	}
}

func TestUnmarshalRejects(t *testing.T) {
	good, err := twoSlices().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	// header builds an encoding from the version on.
	header := func(fields ...uint64) []byte {
		b := []byte(codecMagic)
		for _, f := range fields {
			b = binary.AppendUvarint(b, f)
		}
		return b
	}
	withJob := append(header(1, 4), "demo"...)
	withJob = binary.AppendUvarint(withJob, 1) // generation
	for _, tt := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "header"},
		{"wrong magic", []byte("JSON{}"), "header"},
		{"newer version", header(3), "newer than version 2"},
		{"version 0", header(0), "version 0"},
		{"truncated version", []byte(codecMagic), "truncated"},
		{"overlong varint", append([]byte(codecMagic), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), "64 bits"},
		{"huge job name", header(1, 1<<40), "limit"},
		{"truncated job name", header(1, 10, 'a'), "truncated"},
		{"truncated incarnation", append(append(header(2, 4), "demo"...), 1, 8, 'a'), "truncated"},
		{"huge incarnation", append(append(header(2, 4), "demo"...), 1, 65), "limit"},
		{"huge task count", binary.AppendUvarint(append([]byte(nil), withJob...), 1<<19), "remain"},
		{"task count over cap", binary.AppendUvarint(append([]byte(nil), withJob...), 1<<30), "limit"},
		{"no tasks no slices", binary.AppendUvarint(binary.AppendUvarint(append([]byte(nil), withJob...), 0), 0), "no slices"},
		{"truncated", good[:len(good)-1], "only 1 remain"},
		{"trailing bytes", append(append([]byte(nil), good...), 0), "unexpected bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := UnmarshalAssignment(tt.in)
			if err == nil {
				t.Fatal("decoded garbage without error")
			}
			if !errors.Is(err, ErrCorruptEncoding) && !errors.Is(err, ErrInvalidAssignment) {
				t.Errorf("error %v wraps neither ErrCorruptEncoding nor ErrInvalidAssignment", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestUnmarshalRejectsBadSlices(t *testing.T) {
	// job "j", generation 1, tasks a and b, then the slices under test.
	prefix := append([]byte(codecMagic), 1, 1, 'j', 1, 2, 1, 'a', 0, 1, 'b', 0)
	for _, tt := range []struct {
		name   string
		slices []uint64
		want   string
	}{
		{"zero width", []uint64{1, 0, 1, 0}, "width"},
		{"width past end", []uint64{1, uint64(KeySpaceEnd) + 1, 1, 0}, "width"},
		{"index past tasks", []uint64{1, uint64(KeySpaceEnd), 1, 2}, "past the 2 tasks"},
		{"second index past tasks", []uint64{1, uint64(KeySpaceEnd), 2, 1, 0}, "past the 2 tasks"},
		{"too many slice tasks", []uint64{1, uint64(KeySpaceEnd), 3, 0, 0, 0}, "limit"},
		{"slice with no task", []uint64{1, uint64(KeySpaceEnd), 0}, "no task"},
		{"gap at end", []uint64{1, uint64(half), 1, 0}, "gap"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := append([]byte(nil), prefix...)
			for _, v := range tt.slices {
				b = binary.AppendUvarint(b, v)
			}
			_, err := UnmarshalAssignment(b)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
	// The same prefix with a well-formed slice decodes: the cases above
	// fail for the reason they name.
	ok := append(append([]byte(nil), prefix...), 1)
	ok = binary.AppendUvarint(ok, uint64(KeySpaceEnd))
	ok = append(ok, 2, 0, 0)
	if a, err := UnmarshalAssignment(ok); err != nil || len(a.Slices[0].Tasks) != 2 {
		t.Fatalf("well-formed input: %v %+v", err, a)
	}
}

func FuzzUnmarshalAssignment(f *testing.F) {
	for _, a := range sampleAssignments(f) {
		b, err := a.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{})
	f.Add([]byte(codecMagic))
	f.Add(append([]byte(codecMagic), 3))
	f.Add(encodeV1(f, twoSlices()))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := UnmarshalAssignment(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptEncoding) && !errors.Is(err, ErrInvalidAssignment) {
				t.Fatalf("error %v wraps neither ErrCorruptEncoding nor ErrInvalidAssignment", err)
			}
			return
		}
		if err := a.Validate(); err != nil {
			t.Fatalf("decoded an invalid assignment: %v", err)
		}
		again, err := a.MarshalBinary()
		if err != nil {
			t.Fatalf("cannot re-encode a decoded assignment: %v", err)
		}
		b2, err := UnmarshalAssignment(again)
		if err != nil {
			t.Fatalf("cannot decode a re-encoded assignment: %v", err)
		}
		if !Equal(a, b2) || a.Version() != b2.Version() {
			t.Fatalf("round trip changed the assignment:\n%+v\n%+v", a, b2)
		}
	})
}
