package cachefile_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk/cachefile"
	"github.com/slicerd/slicerd/clerk/clerktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var tasks = []assign.Task{{Name: "t0", Addr: "10.0.0.1:7000"}, {Name: "t1", Addr: "10.0.0.2:7000"}, {Name: "t2"}}

// bigAssignment has nSlices slices of random widths, two tasks each, over
// one task per 100 slices.
func bigAssignment(job string, nSlices int) *assign.Assignment {
	rng := rand.New(rand.NewPCG(7, 7))
	nTasks := max(2, nSlices/100)
	a := &assign.Assignment{Job: job, Generation: 42}
	for i := range nTasks {
		a.Tasks = append(a.Tasks, assign.Task{Name: fmt.Sprintf("task-%04d", i), Addr: fmt.Sprintf("10.1.%d.%d:7000", i/250, i%250)})
	}
	cuts := map[assign.SliceKey]bool{}
	for len(cuts) < nSlices-1 {
		cuts[1+rng.Uint64N(assign.KeySpaceEnd-1)] = true
	}
	bounds := []assign.SliceKey{0}
	for k := range cuts {
		bounds = append(bounds, k)
	}
	slices.Sort(bounds)
	bounds = append(bounds, assign.KeySpaceEnd)
	for i := 0; i+1 < len(bounds); i++ {
		x, y := rng.IntN(nTasks), rng.IntN(nTasks-1)
		if y >= x {
			y++
		}
		names := []string{a.Tasks[x].Name, a.Tasks[y].Name}
		slices.Sort(names)
		a.Slices = append(a.Slices, assign.Slice{Start: bounds[i], End: bounds[i+1], Tasks: names})
	}
	return a
}

func mustEncode(t testing.TB, a *assign.Assignment) []byte {
	t.Helper()
	b, err := cachefile.Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	for _, a := range []*assign.Assignment{
		clerktest.Uniform("kv", 1, tasks, 1),
		clerktest.Uniform("kv", 7, tasks, 16),
		bigAssignment("big-job", 10000),
	} {
		got, err := cachefile.Decode(mustEncode(t, a))
		if err != nil {
			t.Fatalf("gen %d: %v", a.Generation, err)
		}
		if !reflect.DeepEqual(got, a) {
			t.Fatalf("round trip changed the assignment:\n got %+v\nwant %+v", got, a)
		}
	}
}

func TestEncodeIsDeterministic(t *testing.T) {
	a := bigAssignment("kv", 500)
	if b1, b2 := mustEncode(t, a), mustEncode(t, a); !slices.Equal(b1, b2) {
		t.Fatal("two encodings of one assignment differ")
	}
}

func TestDecodeRefusesDamage(t *testing.T) {
	good := mustEncode(t, clerktest.Uniform("kv", 3, tasks, 8))
	// Every truncation is refused, and says so.
	for n := range len(good) {
		if _, err := cachefile.Decode(good[:n]); !errors.Is(err, cachefile.ErrTruncated) || !errors.Is(err, cachefile.ErrCorrupt) {
			t.Fatalf("truncated to %d of %d bytes: err = %v, want ErrTruncated", n, len(good), err)
		}
	}
	// Every single-bit flip is refused. A flip in the version field may
	// read as a newer format, which is refused too.
	for i := range len(good) * 8 {
		bad := slices.Clone(good)
		bad[i/8] ^= 1 << (i % 8)
		_, err := cachefile.Decode(bad)
		if !errors.Is(err, cachefile.ErrCorrupt) && !errors.Is(err, cachefile.ErrNewerFormat) {
			t.Fatalf("bit %d flipped: err = %v, want ErrCorrupt or ErrNewerFormat", i, err)
		}
	}
	if _, err := cachefile.Decode(append(slices.Clone(good), 0)); !errors.Is(err, cachefile.ErrCorrupt) {
		t.Fatalf("trailing byte: err = %v, want ErrCorrupt", err)
	}
	if _, err := cachefile.Decode([]byte("hello, this is not a cache file")); !errors.Is(err, cachefile.ErrCorrupt) || !strings.Contains(err.Error(), "not a slicerd assignment cache file") {
		t.Fatalf("foreign file: err = %v", err)
	}
}

// reseal recomputes the checksum of b after a test changed it on purpose.
func reseal(b []byte) []byte {
	c := crc32.MakeTable(crc32.Castagnoli)
	binary.BigEndian.PutUint32(b[16:], crc32.Update(crc32.Checksum(b[:16], c), c, b[cachefile.HeaderSize:]))
	return b
}

// seal builds a file with a valid header around job and payload.
func seal(version uint16, job string, payload []byte) []byte {
	b := make([]byte, cachefile.HeaderSize, cachefile.HeaderSize+len(job)+len(payload))
	copy(b, cachefile.Magic)
	binary.BigEndian.PutUint16(b[8:], version)
	binary.BigEndian.PutUint16(b[10:], uint16(len(job)))
	binary.BigEndian.PutUint32(b[12:], uint32(len(payload)))
	b = append(b, job...)
	b = append(b, payload...)
	return reseal(b)
}

func TestDecodeRefusesWellSealedNonsense(t *testing.T) {
	a := clerktest.Uniform("kv", 3, tasks, 8)
	payload, err := proto.Marshal(api.ToProto(a))
	if err != nil {
		t.Fatal(err)
	}
	newer := seal(cachefile.Version+1, "kv", payload)
	if _, err := cachefile.Decode(newer); !errors.Is(err, cachefile.ErrNewerFormat) || errors.Is(err, cachefile.ErrCorrupt) {
		t.Fatalf("newer format: err = %v, want ErrNewerFormat only", err)
	}
	if _, err := cachefile.Decode(seal(0, "kv", payload)); !errors.Is(err, cachefile.ErrCorrupt) {
		t.Fatalf("version 0: err = %v, want ErrCorrupt", err)
	}
	if _, err := cachefile.Decode(seal(cachefile.Version, "other", payload)); !errors.Is(err, cachefile.ErrCorrupt) {
		t.Fatalf("header job differs from the assignment's: err = %v, want ErrCorrupt", err)
	}
	if _, err := cachefile.Decode(seal(cachefile.Version, "kv", []byte{0xff, 0xff, 0xff})); !errors.Is(err, cachefile.ErrCorrupt) {
		t.Fatalf("garbage protobuf: err = %v, want ErrCorrupt", err)
	}
	gap := api.ToProto(a)
	gap.Slices = gap.Slices[1:]
	gapBytes, _ := proto.Marshal(gap)
	if _, err := cachefile.Decode(seal(cachefile.Version, "kv", gapBytes)); !errors.Is(err, cachefile.ErrCorrupt) || !errors.Is(err, assign.ErrInvalidAssignment) {
		t.Fatalf("invalid assignment: err = %v, want ErrCorrupt and assign.ErrInvalidAssignment", err)
	}
}

func TestWriteRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.cache")
	if _, err := cachefile.Read(path, "kv"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read of a missing file = %v, want fs.ErrNotExist", err)
	}
	for gen := uint64(1); gen <= 3; gen++ {
		a := clerktest.Uniform("kv", gen, tasks, int(gen)*4)
		if err := cachefile.Write(path, a); err != nil {
			t.Fatal(err)
		}
		got, err := cachefile.Read(path, "kv")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, a) {
			t.Fatalf("gen %d: read back %+v", gen, got)
		}
	}
	if _, err := cachefile.Read(path, "other"); !errors.Is(err, cachefile.ErrWrongJob) {
		t.Fatalf("Read for another job = %v, want ErrWrongJob", err)
	}
	// No temporary files are left behind.
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("directory holds %v, want only the cache file", entries)
	}
}

func TestWriteToMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "kv.cache")
	if err := cachefile.Write(path, clerktest.Uniform("kv", 1, tasks, 2)); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Write into a missing directory = %v, want an error naming the file", err)
	}
}

func TestCheckWritable(t *testing.T) {
	dir := t.TempDir()
	if err := cachefile.CheckWritable(filepath.Join(dir, "kv.cache")); err != nil {
		t.Fatalf("writable directory: %v", err)
	}
	if err := cachefile.CheckWritable(filepath.Join(dir, "missing", "kv.cache")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing directory: %v", err)
	}
	if err := cachefile.CheckWritable(dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("path is a directory: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("CheckWritable left %v behind", entries)
	}
}

func TestWriterCoalescesAndFlushes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.cache")
	w := cachefile.NewWriter(path, assign.Version{}, nil)
	// Stored before Run: only the newest is written, once.
	for gen := uint64(1); gen <= 50; gen++ {
		w.Store(clerktest.Uniform("kv", gen, tasks, 4))
	}
	w.Store(clerktest.Uniform("kv", 10, tasks, 4)) // older: ignored
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	for gen := uint64(51); gen <= 60; gen++ {
		w.Store(clerktest.Uniform("kv", gen, tasks, 4))
	}
	cancel()
	<-done
	a, err := cachefile.Read(path, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if a.Generation != 60 {
		t.Fatalf("file holds generation %d after shutdown, want the last stored, 60", a.Generation)
	}
	if n := w.Writes(); n == 0 || n > 11 {
		t.Fatalf("%d writes for 60 generations stored in two bursts, want 1..11", n)
	}
}

func TestWriterSkipsWhatIsOnDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.cache")
	w := cachefile.NewWriter(path, assign.Version{Generation: 5}, nil)
	w.Store(clerktest.Uniform("kv", 5, tasks, 4))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w.Run(ctx)
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the generation already on disk was written again: %v", err)
	}
}

func TestWriterRetriesAfterFailure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	path := filepath.Join(dir, "kv.cache")
	w := cachefile.NewWriter(path, assign.Version{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	w.Store(clerktest.Uniform("kv", 1, tasks, 4)) // fails: no directory
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	// The final flush retried the pending generation.
	a, err := cachefile.Read(path, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if a.Generation != 1 {
		t.Fatalf("generation %d, want 1", a.Generation)
	}
}

// TestIncarnation: the file keeps the assignment's store incarnation.
func TestIncarnation(t *testing.T) {
	a := clerktest.Uniform("kv", 3, tasks, 8)
	a.Incarnation = "0123456789abcdef0123456789abcdef"
	data := mustEncode(t, a)
	if v := binary.BigEndian.Uint16(data[8:]); v != cachefile.Version {
		t.Fatalf("written with format version %d, want %d", v, cachefile.Version)
	}
	got, err := cachefile.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version() != a.Version() {
		t.Fatalf("decoded version %+v, want %+v", got.Version(), a.Version())
	}
}

// TestReadsVersion1: a file an older client library wrote (format 1, no
// incarnation) still routes, as an assignment of unknown incarnation.
func TestReadsVersion1(t *testing.T) {
	a := clerktest.Uniform("kv", 3, tasks, 8)
	payload, err := proto.Marshal(api.ToProto(a))
	if err != nil {
		t.Fatal(err)
	}
	got, err := cachefile.Decode(seal(1, "kv", payload))
	if err != nil {
		t.Fatalf("format 1 file: %v", err)
	}
	if !assign.Equal(got, a) || got.Version() != (assign.Version{Generation: 3}) {
		t.Fatalf("format 1 file decoded as version %+v", got.Version())
	}
	a.Incarnation = "abc"
	payload, _ = proto.Marshal(api.ToProto(a))
	if _, err := cachefile.Decode(seal(1, "kv", payload)); !errors.Is(err, cachefile.ErrCorrupt) {
		t.Fatalf("format 1 file holding an incarnation: err = %v, want ErrCorrupt", err)
	}
}

// TestWriterWritesAnotherIncarnation: an assignment of a recreated store
// replaces the file's, although its generation is lower.
func TestWriterWritesAnotherIncarnation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.cache")
	old := clerktest.Uniform("kv", 50, tasks, 4)
	old.Incarnation = "old"
	if err := cachefile.Write(path, old); err != nil {
		t.Fatal(err)
	}
	w := cachefile.NewWriter(path, old.Version(), nil)
	fresh := clerktest.Uniform("kv", 1, tasks, 4)
	fresh.Incarnation = "new"
	w.Store(fresh)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w.Run(ctx)
	a, err := cachefile.Read(path, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if a.Version() != fresh.Version() {
		t.Fatalf("file holds %+v, want the recreated store's %+v", a.Version(), fresh.Version())
	}
}

func FuzzDecode(f *testing.F) {
	good, _ := cachefile.Encode(clerktest.Uniform("kv", 3, tasks, 8))
	f.Add(good)
	f.Add(good[:cachefile.HeaderSize])
	payload, _ := proto.Marshal(api.ToProto(clerktest.Uniform("kv", 3, tasks, 8)))
	f.Add(seal(1, "kv", payload))
	f.Add([]byte(cachefile.Magic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
	})
}

// FuzzDecodePayload fuzzes the part behind the checksum, which FuzzDecode
// rarely reaches: job and payload get a valid header.
func FuzzDecodePayload(f *testing.F) {
	a := clerktest.Uniform("kv", 3, tasks, 8)
	payload, _ := proto.Marshal(api.ToProto(a))
	f.Add("kv", payload)
	f.Add("other", payload)
	f.Add("kv", []byte{})
	f.Add("", []byte{0x0a, 0x00})
	f.Fuzz(func(t *testing.T, job string, payload []byte) {
		if len(job) > 0xffff {
			return
		}
		checkDecode(t, seal(cachefile.Version, job, payload))
	})
}

// checkDecode checks that Decode either refuses data with a sentinel error
// or returns a valid assignment that encodes back to something that
// decodes to the same assignment.
func checkDecode(t *testing.T, data []byte) {
	a, err := cachefile.Decode(data)
	if err != nil {
		if !errors.Is(err, cachefile.ErrCorrupt) && !errors.Is(err, cachefile.ErrNewerFormat) {
			t.Fatalf("Decode error %v matches no sentinel", err)
		}
		if a != nil {
			t.Fatal("Decode returned an assignment with an error")
		}
		return
	}
	if err := a.Validate(); err != nil {
		t.Fatalf("Decode returned an invalid assignment: %v", err)
	}
	again, err := cachefile.Decode(mustEncode(t, a))
	if err != nil {
		t.Fatalf("re-encoding a decoded assignment does not decode: %v", err)
	}
	if !reflect.DeepEqual(again, a) {
		t.Fatalf("re-encoding changed the assignment")
	}
}

func benchmarkEncode(b *testing.B, n int) {
	a := bigAssignment("kv", n)
	data := mustEncode(b, a)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cachefile.Encode(a); err != nil {
			b.Fatal(err)
		}
	}
}

func benchmarkDecode(b *testing.B, n int) {
	data := mustEncode(b, bigAssignment("kv", n))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cachefile.Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode100(b *testing.B)   { benchmarkEncode(b, 100) }
func BenchmarkEncode10000(b *testing.B) { benchmarkEncode(b, 10000) }
func BenchmarkDecode100(b *testing.B)   { benchmarkDecode(b, 100) }
func BenchmarkDecode10000(b *testing.B) { benchmarkDecode(b, 10000) }

// BenchmarkWrite10000 is one durable write (encode, write, fsync, rename,
// directory fsync) of a 10,000-slice assignment; it depends on the disk.
func BenchmarkWrite10000(b *testing.B) {
	a := bigAssignment("kv", 10000)
	path := filepath.Join(b.TempDir(), "kv.cache")
	b.ReportAllocs()
	for b.Loop() {
		if err := cachefile.Write(path, a); err != nil {
			b.Fatal(err)
		}
	}
}
