// Package clerktest provides an in-process slicerd Distributor for tests of
// code that uses a Clerk or a Slicelet: a real Connect server over HTTP/2
// cleartext on a loopback port whose assignments the test controls.
package clerktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
)

// Server serves slicer.v1.DistributorService and slicer.v1.BackupService
// from assignments the test publishes. A stream first gets the job's latest
// assignment if it supersedes the caller's known one (a newer generation,
// or another store incarnation, as slicerd's servers decide), then every
// message published afterwards, whatever its generation, so a test can also
// send stale or malformed ones. It sends full assignments only, as a
// server that predates deltas does, unless the test sends a delta. A job nothing was published for is
// NOT_FOUND.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}

	mu       sync.Mutex
	jobs     map[string]*job
	changed  chan struct{} // closed and replaced on every publish or drop
	drops    uint64        // bumped by DropStreams
	dropErr  error
	failWith error
	open     int
	requests []*slicerv1.WatchAssignmentRequest
}

type job struct {
	latest *slicerv1.Assignment
	log    []*slicerv1.WatchAssignmentResponse
}

// NewServer starts a Server on a free loopback port.
func NewServer() (*Server, error) { return NewServerAt("127.0.0.1:0") }

// NewServerAt starts a Server listening on addr, for example the address of
// a Server that was closed, to simulate a restart.
func NewServerAt(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("clerktest: listen on %s: %w", addr, err)
	}
	s := &Server{ln: ln, done: make(chan struct{}), jobs: map[string]*job{}, changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle(slicerv1connect.NewDistributorServiceHandler(s))
	mux.Handle(slicerv1connect.NewBackupServiceHandler(s))
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	s.srv = &http.Server{Handler: mux, Protocols: protocols}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Addr is the host:port the Server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the Server, cutting every open stream, and waits for it.
func (s *Server) Close() {
	_ = s.srv.Close()
	<-s.done
}

// Publish sends a to the streams of a.Job.
func (s *Server) Publish(a *assign.Assignment) { s.Send(a.Job, api.ToProto(a)) }

// PublishCommitted sends a to the streams of a.Job with committed as its
// commit time (WatchAssignmentResponse.committed_unix_nano), as slicerd's
// Distributors send the generations their Assigner committed.
func (s *Server) PublishCommitted(a *assign.Assignment, committed time.Time) {
	p := api.ToProto(a)
	s.send(a.Job, p, &slicerv1.WatchAssignmentResponse{Assignment: p, CommittedUnixNano: api.CommittedUnixNano(committed)})
}

// Send sends p, as is, to the streams of jobName and makes it the job's
// latest message.
func (s *Server) Send(jobName string, p *slicerv1.Assignment) {
	s.send(jobName, p, &slicerv1.WatchAssignmentResponse{Assignment: p})
}

// send makes latest the job's latest assignment and sends m to its
// streams.
func (s *Server) send(jobName string, latest *slicerv1.Assignment, m *slicerv1.WatchAssignmentResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[jobName]
	if j == nil {
		j = &job{}
		s.jobs[jobName] = j
	}
	j.latest = latest
	j.log = append(j.log, m)
	s.notify()
}

// SendDelta sends d, as is, to the streams of jobName, and makes latest
// the job's latest assignment, the one a new stream starts with. A test
// sends a delta that does not lead to latest to see a subscriber repair
// what it holds.
func (s *Server) SendDelta(jobName string, latest *slicerv1.Assignment, d *slicerv1.AssignmentDelta) {
	s.send(jobName, latest, &slicerv1.WatchAssignmentResponse{Delta: d})
}

// Fail makes every new stream fail with err (a *connect.Error sets the
// code); nil restores normal service.
func (s *Server) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failWith = err
}

// DropStreams ends every open stream with err (nil ends them cleanly).
func (s *Server) DropStreams(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drops++
	s.dropErr = err
	s.notify()
}

// OpenStreams is the number of WatchAssignment streams being served.
func (s *Server) OpenStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// Requests returns every WatchAssignment request received so far.
func (s *Server) Requests() []*slicerv1.WatchAssignmentRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*slicerv1.WatchAssignmentRequest(nil), s.requests...)
}

func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// WatchAssignment implements the streaming method of both services.
func (s *Server) WatchAssignment(ctx context.Context, req *connect.Request[slicerv1.WatchAssignmentRequest], stream *connect.ServerStream[slicerv1.WatchAssignmentResponse]) error {
	s.mu.Lock()
	s.requests = append(s.requests, req.Msg)
	if s.failWith != nil {
		err := s.failWith
		s.mu.Unlock()
		return err
	}
	j := s.jobs[req.Msg.GetJob()]
	if j == nil {
		s.mu.Unlock()
		return connect.NewError(connect.CodeNotFound, errors.New("clerktest: no assignment published for job "+req.Msg.GetJob()))
	}
	var pending []*slicerv1.WatchAssignmentResponse
	latest := assign.Version{Incarnation: j.latest.GetIncarnation(), Generation: j.latest.GetGeneration()}
	if latest.Supersedes(assign.Version{Incarnation: req.Msg.GetKnownIncarnation(), Generation: req.Msg.GetKnownGeneration()}) {
		pending = append(pending, &slicerv1.WatchAssignmentResponse{Assignment: j.latest})
	}
	next, drops := len(j.log), s.drops
	s.open++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.open--
		s.mu.Unlock()
	}()

	for {
		for _, p := range pending {
			if err := stream.Send(p); err != nil {
				return err
			}
		}
		s.mu.Lock()
		changed := s.changed
		if s.drops != drops {
			err := s.dropErr
			s.mu.Unlock()
			return err
		}
		pending = append(pending[:0], j.log[next:]...)
		next = len(j.log)
		s.mu.Unlock()
		if len(pending) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// GetAssignment implements the unary method of both services.
func (s *Server) GetAssignment(_ context.Context, req *connect.Request[slicerv1.GetAssignmentRequest]) (*connect.Response[slicerv1.GetAssignmentResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWith != nil {
		return nil, s.failWith
	}
	j := s.jobs[req.Msg.GetJob()]
	if j == nil {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("clerktest: no assignment published for job "+req.Msg.GetJob()))
	}
	return connect.NewResponse(&slicerv1.GetAssignmentResponse{Assignment: j.latest}), nil
}
