package etcdstore

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
)

func TestHeadRoundTrip(t *testing.T) {
	h := head{generation: 7, set: "00ff00ff00ff00ff", chunks: 3, size: 2*chunkBytes + 1, sum: 0xfeedface}
	got, err := decodeHead(encodeHead(h))
	if err != nil || got != h {
		t.Fatalf("decodeHead(encodeHead(%+v)) = %+v, %v", h, got, err)
	}
	for _, bad := range []head{
		{generation: 0, set: h.set, chunks: 3, size: h.size},
		{generation: 1, set: "00FF00FF00FF00FF", chunks: 3, size: h.size},
		{generation: 1, set: h.set, chunks: 2, size: h.size},
		{generation: 1, set: h.set, chunks: 1, size: inlineMax},
		{generation: 1, set: h.set, chunks: maxChunks + 1, size: maxChunks*chunkBytes + 1},
	} {
		if _, err := decodeHead(encodeHead(bad)); err == nil {
			t.Errorf("decodeHead accepted %+v", bad)
		}
	}
}

// FuzzDecodeHead: decodeHead never panics, and what it accepts encodes
// back to a head that decodes the same.
func FuzzDecodeHead(f *testing.F) {
	f.Add(encodeHead(head{generation: 1, set: "0123456789abcdef", chunks: 2, size: inlineMax + 1, sum: 1}))
	f.Add(encodeHead(head{generation: 1 << 40, set: "ffffffffffffffff", chunks: maxChunks, size: maxChunks * chunkBytes}))
	f.Add([]byte("SLCH"))
	f.Add([]byte("SLCA\x02"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHead(b)
		if err != nil {
			return
		}
		again, err := decodeHead(encodeHead(h))
		if err != nil || again != h {
			t.Fatalf("%+v encodes to a head that decodes to %+v, %v", h, again, err)
		}
		if !bytes.HasPrefix(b, []byte(headMagic)) {
			t.Fatalf("accepted %q without the magic", b)
		}
	})
}

// A Load or commit has the request timeout again for every four pieces.
func TestPiecesTimeout(t *testing.T) {
	s := &Store{reqTimeout: 5 * time.Second}
	for _, tc := range []struct {
		size int
		want time.Duration
	}{
		{inlineMax, 0},
		{inlineMax + 1, 5 * time.Second},     // 2 pieces
		{4 * chunkBytes, 5 * time.Second},    // 4 pieces
		{4*chunkBytes + 1, 10 * time.Second}, // 5 pieces
		{11 << 20, 30 * time.Second},         // 22 pieces: a job of 10^6 slices
	} {
		if got := s.piecesTimeout(tc.size); got != tc.want {
			t.Errorf("piecesTimeout(%d) = %v, want %v", tc.size, got, tc.want)
		}
	}
}

// StoredGeneration reads the generation of an inline assignment and of a
// head alike, and refuses what is neither.
func TestStoredGeneration(t *testing.T) {
	a, err := assign.Initial("kv", []assign.Task{{Name: "t0", Addr: "h:1"}}, assign.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	a.Generation = 42
	inline, err := storage.EncodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		v    []byte
		want uint64
	}{
		"inline": {inline, 42},
		"head":   {encodeHead(head{generation: 9, set: "0123456789abcdef", chunks: 2, size: inlineMax + 1}), 9},
	} {
		if got, err := StoredGeneration("kv", tc.v); err != nil || got != tc.want {
			t.Errorf("%s: generation %d, %v; want %d", name, got, err, tc.want)
		}
	}
	for name, v := range map[string][]byte{
		"corrupt head": []byte("SLCH\x01"),
		"garbage":      []byte("not a value"),
		"absent":       nil,
	} {
		if _, err := StoredGeneration("kv", v); !errors.Is(err, storage.ErrCorrupt) && !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("%s: %v, want an error matching ErrCorrupt or ErrNotFound", name, err)
		}
	}
}
