package clerk

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
)

const streamVectors = "../api/conformance/stream.json"

// streamFile is api/conformance/stream.json: for each case, the streams a
// server sends a fresh client one after the other, and what the client
// holds when each has ended and what it sends when it watches again.
type streamFile struct {
	About string       `json:"about"`
	Cases []streamCase `json:"cases"`
}

type streamCase struct {
	Name    string         `json:"name"`
	Streams []streamScript `json:"streams"`
}

type streamScript struct {
	// Messages are slicer.v1.WatchAssignmentResponse messages in
	// protobuf's JSON form, sent in order before the stream ends.
	Messages []json.RawMessage `json:"messages"`
	Then     streamState       `json:"then"`
}

// streamState is what the client must hold once a stream ended, and the
// known_generation and known_incarnation of its next WatchAssignment.
type streamState struct {
	Generation      string `json:"installed_generation"`
	Incarnation     string `json:"installed_incarnation"`
	KnownGeneration string `json:"resume_known_generation"`
	KnownInc        string `json:"resume_known_incarnation"`
}

func streamCases(t *testing.T) []streamCase {
	base := conformanceAssignments()["uneven slices, replicas and a task on two slices"]
	at := func(gen uint64, inc string, move int) *assign.Assignment {
		b := &assign.Assignment{Job: base.Job, Generation: gen, Incarnation: inc, Tasks: base.Tasks}
		for i, s := range base.Slices {
			s.Tasks = append([]string(nil), s.Tasks...)
			if i == move {
				s.Tasks = []string{"kv-2"}
			}
			b.Slices = append(b.Slices, s)
		}
		return b
	}
	msg := func(m *slicerv1.WatchAssignmentResponse) json.RawMessage {
		b, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	full := func(a *assign.Assignment) json.RawMessage {
		return msg(&slicerv1.WatchAssignmentResponse{Assignment: api.ToProto(a)})
	}
	delta := func(from, to *assign.Assignment, corrupt bool) json.RawMessage {
		d := api.Diff(from, to)
		if corrupt {
			d.Checksum++
		}
		return msg(&slicerv1.WatchAssignmentResponse{Delta: d})
	}
	state := func(gen uint64, inc string, knownGen uint64, knownInc string) streamState {
		return streamState{strconv.FormatUint(gen, 10), inc, strconv.FormatUint(knownGen, 10), knownInc}
	}
	a1, a2, a3 := at(1, "inc-a", -1), at(2, "inc-a", 1), at(3, "inc-a", 3)
	b1 := at(1, "inc-b", 2)
	old5 := at(5, "", 1)
	other := at(9, "inc-a", 1)
	other.Job = "other-job"
	both := &slicerv1.WatchAssignmentResponse{Assignment: api.ToProto(a3), Delta: api.Diff(a2, a3)}
	return []streamCase{
		{Name: "a snapshot, then deltas on it", Streams: []streamScript{
			{Messages: []json.RawMessage{full(a1), delta(a1, a2, false), delta(a2, a3, false)}, Then: state(3, "inc-a", 3, "inc-a")},
		}},
		{Name: "an older or equal generation of the same incarnation is ignored", Streams: []streamScript{
			{Messages: []json.RawMessage{full(a2), full(a1), full(a2)}, Then: state(2, "inc-a", 2, "inc-a")},
		}},
		{Name: "another incarnation replaces the held assignment whatever its generation (a reset)", Streams: []streamScript{
			{Messages: []json.RawMessage{full(a3)}, Then: state(3, "inc-a", 3, "inc-a")},
			{Messages: []json.RawMessage{full(b1)}, Then: state(1, "inc-b", 1, "inc-b")},
		}},
		{Name: "a delta whose checksum does not match is discarded, and the client watches again from nothing", Streams: []streamScript{
			{Messages: []json.RawMessage{full(a1), delta(a1, a2, true)}, Then: state(1, "inc-a", 0, "")},
			{Messages: []json.RawMessage{full(a2)}, Then: state(2, "inc-a", 2, "inc-a")},
		}},
		{Name: "a delta for another base generation is discarded", Streams: []streamScript{
			{Messages: []json.RawMessage{full(a1), delta(a2, a3, false)}, Then: state(1, "inc-a", 0, "")},
		}},
		{Name: "an assignment without an incarnation compares by generation only", Streams: []streamScript{
			{Messages: []json.RawMessage{full(a2), full(old5)}, Then: state(5, "", 5, "")},
		}},
		{Name: "a message with both an assignment and a delta is refused, and the stream dropped", Streams: []streamScript{
			{Messages: []json.RawMessage{full(a2), msg(both), full(a3)}, Then: state(2, "inc-a", 2, "inc-a")},
		}},
		{Name: "an assignment of another job is refused, and the stream dropped", Streams: []streamScript{
			{Messages: []json.RawMessage{full(a1), full(other), full(a2)}, Then: state(1, "inc-a", 1, "inc-a")},
		}},
		{Name: "a resumed stream sends what the client holds", Streams: []streamScript{
			{Messages: []json.RawMessage{full(a1)}, Then: state(1, "inc-a", 1, "inc-a")},
			{Messages: []json.RawMessage{delta(a1, a2, false)}, Then: state(2, "inc-a", 2, "inc-a")},
		}},
	}
}

// scripted is a DistributorService that sends each WatchAssignment call
// the next stream of a script and records the calls.
type scripted struct {
	slicerv1connect.UnimplementedDistributorServiceHandler
	streams  [][]*slicerv1.WatchAssignmentResponse
	requests chan *slicerv1.WatchAssignmentRequest
	next     int
}

func (s *scripted) WatchAssignment(ctx context.Context, req *connect.Request[slicerv1.WatchAssignmentRequest], out *connect.ServerStream[slicerv1.WatchAssignmentResponse]) error {
	s.requests <- proto.Clone(req.Msg).(*slicerv1.WatchAssignmentRequest)
	if s.next >= len(s.streams) {
		<-ctx.Done()
		return nil
	}
	msgs := s.streams[s.next]
	s.next++
	for _, m := range msgs {
		if err := out.Send(m); err != nil {
			return err
		}
	}
	return connect.NewError(connect.CodeUnavailable, nil) // the stream ends; the client watches again
}

func TestConformanceStream(t *testing.T) {
	var want streamFile
	if *updateConformance {
		want.About = "WatchAssignment streams a client must follow: after each stream ends, what it holds and what it resumes with. docs/client-contract.md."
		want.Cases = streamCases(t)
		writeJSON(t, streamVectors, want)
	}
	readJSON(t, streamVectors, &want)
	if len(want.Cases) == 0 {
		t.Fatal("no stream vectors")
	}
	for _, c := range want.Cases {
		t.Run(c.Name, func(t *testing.T) {
			srv := &scripted{requests: make(chan *slicerv1.WatchAssignmentRequest, 16)}
			for _, st := range c.Streams {
				var msgs []*slicerv1.WatchAssignmentResponse
				for _, raw := range st.Messages {
					var m slicerv1.WatchAssignmentResponse
					if err := protojson.Unmarshal(raw, &m); err != nil {
						t.Fatal(err)
					}
					msgs = append(msgs, &m)
				}
				srv.streams = append(srv.streams, msgs)
			}
			addr := serveScripted(t, srv)
			cfg := DefaultConfig()
			cfg.Job, cfg.Addrs, cfg.SubsetSize = "kv", []string{addr}, 0
			cfg.MinBackoff, cfg.MaxBackoff = time.Millisecond, 5*time.Millisecond
			ck, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- ck.Run(ctx) }()
			defer func() { cancel(); <-done }()
			first := <-srv.requests
			if first.GetKnownGeneration() != 0 || first.GetKnownIncarnation() != "" {
				t.Fatalf("a fresh client watched with known generation %d, incarnation %q", first.GetKnownGeneration(), first.GetKnownIncarnation())
			}
			for i, st := range c.Streams {
				var resumed *slicerv1.WatchAssignmentRequest
				select {
				case resumed = <-srv.requests:
				case <-time.After(30 * time.Second):
					t.Fatalf("stream %d: the client did not watch again", i)
				}
				// The client watches again only once it has handled the
				// whole stream: what it holds now is what it must.
				got := streamState{KnownGeneration: strconv.FormatUint(resumed.GetKnownGeneration(), 10), KnownInc: resumed.GetKnownIncarnation()}
				if a := ck.Assignment(); a != nil {
					got.Generation, got.Incarnation = strconv.FormatUint(a.Generation, 10), a.Incarnation
				} else {
					got.Generation = "0"
				}
				if got != st.Then {
					t.Errorf("after stream %d: %+v, want %+v", i, got, st.Then)
				}
			}
		})
	}
}

func serveScripted(t *testing.T, s *scripted) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(slicerv1connect.NewDistributorServiceHandler(s))
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: mux, Protocols: protocols}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}
