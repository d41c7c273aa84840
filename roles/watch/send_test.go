package watch

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/testwait"
)

func TestSendBudget(t *testing.T) {
	b := &sendBudget{limit: 100}
	if !b.take(60) || !b.take(40) {
		t.Fatal("budget of 100 refused 60 then 40")
	}
	if b.take(1) {
		t.Fatal("spent budget granted 1 more byte")
	}
	b.give(40)
	if !b.take(30) {
		t.Fatal("budget refused 30 after 40 were given back")
	}
	if b.used.Load() != 90 {
		t.Errorf("used %d, want 90", b.used.Load())
	}
	var none *sendBudget
	if !none.take(1 << 40) {
		t.Error("a nil budget refused a send; it has no limit")
	}
	none.give(1 << 40)
}

// TestSharingCodecEncodings checks that every way the codec hands out a
// shared response decodes to the same message, and that only the
// zero-copy way into an empty buffer returns the shared bytes.
func TestSharingCodecEncodings(t *testing.T) {
	a, err := assign.Initial("kv", []assign.Task{{Name: "t0", Addr: "127.0.0.1:1"}, {Name: "t1", Addr: "127.0.0.1:2"}}, assign.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var encodes atomic.Int64
	s := newMessage(a, 1_790_000_000_000_000_000, &encodes)
	want, err := proto.Marshal(&slicerv1.WatchAssignmentResponse{Assignment: api.ToProto(a), CommittedUnixNano: 1_790_000_000_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	c := Codec{}
	prefix := []byte("prefix")
	for _, tc := range []struct {
		name   string
		encode func() ([]byte, error)
		dst    []byte
		shared bool
	}{
		{"Marshal", func() ([]byte, error) { return c.Marshal(s) }, nil, false},
		{"MarshalAppend", func() ([]byte, error) { return c.MarshalAppend(nil, s) }, nil, false},
		{"MarshalAppend after a prefix", func() ([]byte, error) { return c.MarshalAppend(bytes.Clone(prefix), s) }, prefix, false},
		{"Marshal zero-copy", func() ([]byte, error) { return c.Marshal(zeroCopyResponse{s}) }, nil, false},
		{"MarshalAppend zero-copy", func() ([]byte, error) { return c.MarshalAppend(nil, zeroCopyResponse{s}) }, nil, true},
		{"MarshalAppend zero-copy after a prefix", func() ([]byte, error) { return c.MarshalAppend(bytes.Clone(prefix), zeroCopyResponse{s}) }, prefix, false},
	} {
		got, err := tc.encode()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !bytes.Equal(got, append(bytes.Clone(tc.dst), want...)) {
			t.Errorf("%s: wrong bytes", tc.name)
		}
		if shared := cap(got) >= NoRecycleCap; shared != tc.shared {
			t.Errorf("%s: returned the shared bytes %v, want %v", tc.name, shared, tc.shared)
		}
	}
	if n := encodes.Load(); n != 1 {
		t.Errorf("%d encodings, want 1", n)
	}
	var back slicerv1.WatchAssignmentResponse
	if err := c.Unmarshal(want, &back); err != nil || !proto.Equal(&back, s.Proto()) {
		t.Errorf("Unmarshal: %v", err)
	}
	// Other codecs encode the message through its protobuf form.
	if got, err := protojson.Marshal(s); err != nil || !bytes.Equal(got, must(protojson.Marshal(s.Proto()))) {
		t.Errorf("protojson.Marshal: %s, %v", got, err)
	}
	if got, err := proto.Marshal(s); err != nil || !bytes.Equal(got, want) {
		t.Errorf("proto.Marshal of the message: %v", err)
	}
	if _, err := c.Marshal(42); !errors.Is(err, errCodec) {
		t.Errorf("Marshal(42): %v, want errCodec", err)
	}
}

// The sweep resets a send only once it has waited a whole timeout, never
// a stream between sends, and never one that ended.
func TestSendWatchResetsOnlyLateSends(t *testing.T) {
	var nilDog *sendWatchdog
	nilDog.arm() // no timeout: a no-op
	nilDog.disarm()
	nilDog.stop()
	if (*SendWatch)(nil).watch(nil) != nil || NewSendWatch(0).watch(http.NewResponseController(httptest.NewRecorder())) != nil {
		t.Fatal("a watchdog without a timeout")
	}

	w := NewSendWatch(time.Hour) // swept by hand below
	rec := &deadlineRecorder{ResponseWriter: httptest.NewRecorder()}
	d := w.watch(http.NewResponseController(rec))
	sweep := func(n int) {
		for range n {
			w.sweep()
		}
	}
	d.arm()
	d.disarm()
	sweep(2 * sweepsPerTimeout)
	if rec.set != 0 {
		t.Fatalf("an idle stream was reset (%d deadlines)", rec.set)
	}
	d.arm()
	sweep(sweepsPerTimeout)
	if rec.set != 0 {
		t.Fatalf("a send was reset before a whole timeout had passed (%d deadlines)", rec.set)
	}
	sweep(1)
	if rec.set != 1 || !rec.last.Before(time.Now()) {
		t.Fatalf("a send stuck for a timeout set %d deadlines, the last %v; want one in the past", rec.set, rec.last)
	}
	d.disarm()
	d.arm()
	d.stop()
	sweep(2 * sweepsPerTimeout)
	if rec.set != 1 {
		t.Fatal("the sweep used the ResponseController of a stream that ended")
	}
	if len(w.dogs) != 0 {
		t.Fatalf("%d watchdogs left after their streams ended", len(w.dogs))
	}
}

// deadlineRecorder records the write deadlines http.ResponseController
// sets on it.
type deadlineRecorder struct {
	http.ResponseWriter
	set  int
	last time.Time
}

func (d *deadlineRecorder) SetWriteDeadline(t time.Time) error {
	d.set++
	d.last = t
	return nil
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A whole assignment's protobuf form is built once for callers that
// overlap, is the encoding's content, and is not kept once no caller
// holds it.
func TestMessageProtoIsSharedWhileHeld(t *testing.T) {
	var encodes atomic.Int64
	msg := newMessage(pacedAssignment(3), 42, &encodes)
	first := msg.Proto()
	if second := msg.Proto(); second != first {
		t.Fatal("a second call built another form while the first is held")
	}
	wire, err := msg.encoded()
	if err != nil {
		t.Fatal(err)
	}
	if want, err := proto.Marshal(first); err != nil || !bytes.Equal(wire, want) {
		t.Fatalf("the form is not what the message encodes (%v)", err)
	}
	var freed atomic.Bool
	runtime.AddCleanup(first, func(struct{}) { freed.Store(true) }, struct{}{})
	first = nil
	testwait.For(t, "the form to be freed", func() bool {
		runtime.GC()
		return freed.Load()
	})
	if again := msg.Proto(); again == nil || again.GetAssignment().GetGeneration() != 3 || again.GetCommittedUnixNano() != 42 {
		t.Fatalf("the form built again is %v", again)
	}
	runtime.KeepAlive(msg)
}
