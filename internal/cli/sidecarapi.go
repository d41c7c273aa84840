package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/connlimit"
	"github.com/slicerd/slicerd/slicelet"
)

// The sidecar's local API (slicer.v1.SidecarService): what a Go task gets
// from its Slicelet, for an application in any language, on a Unix
// socket only the sidecar's user may use.
const (
	// localMaxStreams bounds the WatchRanges streams open at once.
	localMaxStreams = 16
	// localMaxRequestBytes bounds one request.
	localMaxRequestBytes = 4 << 20
	// localMaxConns bounds the local API's open connections, and
	// localMaxConnStreams the calls at once on one HTTP/2 connection: at
	// most 16,384 calls in flight, each a goroutine.
	localMaxConns       = 256
	localMaxConnStreams = 64
	// localMaxLoads bounds the loads of one ReportLoad.
	localMaxLoads = 10_000
)

// localAPI serves SidecarService for one Slicelet. Each open ranges stream
// waits for the Slicelet's next assignment, then reads the current ranges
// and sends what changed since its last message, so a slow reader gets
// merged changes and never holds the Slicelet up.
type localAPI struct {
	sl    *slicelet.Slicelet
	state *sidecarState
	log   *slog.Logger

	mu      sync.Mutex
	streams int

	drainMu sync.Mutex // serialises SetDraining calls

	handles handleTable // the handles the application holds
}

func newLocalAPI(sl *slicelet.Slicelet, state *sidecarState, log *slog.Logger) *localAPI {
	return &localAPI{sl: sl, state: state, log: log}
}

func keyRanges(ss []assign.Slice) []*slicerv1.KeyRange {
	out := make([]*slicerv1.KeyRange, len(ss))
	for i, s := range ss {
		out[i] = &slicerv1.KeyRange{Start: s.Start, End: s.End}
	}
	return out
}

// WatchRanges implements SidecarService.
func (l *localAPI) WatchRanges(ctx context.Context, _ *connect.Request[slicerv1.WatchRangesRequest], stream *connect.ServerStream[slicerv1.WatchRangesResponse]) error {
	l.mu.Lock()
	if l.streams >= localMaxStreams {
		l.mu.Unlock()
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%d WatchRanges streams are open, the most the sidecar serves; close one", localMaxStreams))
	}
	l.streams++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.streams--
		l.mu.Unlock()
	}()
	// A message for every generation installed, so that the application
	// follows the generation too (wait_generation), also when it changes
	// nothing of this task's ranges; a slow reader gets the changes
	// merged into the latest.
	var sent []assign.Slice
	var sentGen uint64
	for {
		owned, gen, next := l.sl.NextRanges()
		if gen > 0 && gen != sentGen {
			gained, lost := slicelet.DiffRanges(sent, owned)
			msg := &slicerv1.WatchRangesResponse{Generation: gen, Gained: keyRanges(gained), Lost: keyRanges(lost), Owned: keyRanges(owned)}
			if err := stream.Send(msg); err != nil {
				return err
			}
			sent, sentGen = owned, gen
		}
		select {
		case <-ctx.Done():
			return nil
		case <-next:
		}
	}
}

// ReportLoad implements SidecarService.
func (l *localAPI) ReportLoad(_ context.Context, req *connect.Request[slicerv1.SidecarServiceReportLoadRequest]) (*connect.Response[slicerv1.SidecarServiceReportLoadResponse], error) {
	loads := req.Msg.GetLoads()
	if len(loads) > localMaxLoads {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%d loads in one call; send at most %d", len(loads), localMaxLoads))
	}
	for i, ld := range loads {
		if c := ld.GetCost(); math.IsNaN(c) || math.IsInf(c, 0) || c < 0 || c > assign.MaxLoad {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("load %d: cost %v must be finite, not negative and at most %g; nothing of this call was counted", i, c, assign.MaxLoad))
		}
	}
	for _, ld := range loads {
		if err := l.sl.ReportLoad(ld.GetKey(), ld.GetCost()); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
	}
	return connect.NewResponse(&slicerv1.SidecarServiceReportLoadResponse{}), nil
}

// SetDraining implements SidecarService. A drain the application asked
// for holds until it ends it, whatever the health checks find.
func (l *localAPI) SetDraining(ctx context.Context, req *connect.Request[slicerv1.SetDrainingRequest]) (*connect.Response[slicerv1.SetDrainingResponse], error) {
	l.drainMu.Lock()
	defer l.drainMu.Unlock()
	var err error
	switch {
	case req.Msg.GetDraining():
		// Drain advertises the drain at once, then waits (at most the
		// call's deadline, or a minute) for the keys to move.
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = l.sl.Drain(dctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			err = nil // drained, the keys still on their way
		}
	case !l.state.healthDrained.Load():
		err = l.sl.Undrain()
	default:
		// The application fails its health checks: the health loop keeps
		// the drain until it passes them again.
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("set draining %v: %w", req.Msg.GetDraining(), err))
	}
	l.state.appDrained.Store(req.Msg.GetDraining())
	l.log.Info("sidecar: the application set the task's draining state", "draining", req.Msg.GetDraining())
	return connect.NewResponse(&slicerv1.SetDrainingResponse{}), nil
}

// listenLocal creates the local API's Unix socket at path, mode 0600. A
// socket left by an earlier run is removed; any other file there is an
// error.
func listenLocal(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket; choose another --local-api-socket", path)
		}
		// A socket some process still serves on is not taken over: its
		// application would lose its sidecar, and the other sidecar, when
		// it stops, would have removed this one's socket.
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is served by another process (a sidecar of this task still running?); stop it, or choose another --local-api-socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove the old socket %s: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w; check that its directory exists and is writable", path, err)
	}
	// Closing removes the socket only if it is still this one (below).
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	own, err := os.Lstat(path)
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		ln.Close()
		return nil, err
	}
	return &peerCheckListener{Listener: ln, uid: os.Getuid(), path: path, own: own}, nil
}

// peerCheckListener accepts only connections whose peer credentials name
// the sidecar's user or root; the socket's mode already keeps others out,
// this holds even if its mode or directory is loosened. Closing it
// removes the socket file at path if it is still the one it created, own.
type peerCheckListener struct {
	net.Listener
	uid  int
	path string
	own  os.FileInfo
}

func (l *peerCheckListener) Close() error {
	err := l.Listener.Close()
	if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.own) {
		if rerr := os.Remove(l.path); rerr != nil && err == nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = rerr
		}
	}
	return err
}

func (l *peerCheckListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if uc, ok := c.(*net.UnixConn); ok {
			if uid, err := peerUID(uc); err == nil && (uid == l.uid || uid == 0) {
				return c, nil
			}
		}
		c.Close()
	}
}

func peerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *syscall.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if serr != nil {
		return -1, serr
	}
	return int(cred.Uid), nil
}

// limitLocal caps the local API's connections at localMaxConns; one more
// is closed at once.
func limitLocal(ln net.Listener, log *slog.Logger) net.Listener {
	return connlimit.Wrap(ln, connlimit.Limits{Max: localMaxConns, MaxPerIP: localMaxConns, LogInterval: 10 * time.Second, Logger: log})
}

// serveLocal serves api on ln until ctx ends, then closes it and removes
// the socket. It accepts at most localMaxConns connections at once. The
// handles it gave stay held: the caller releases them once the Slicelet
// has stopped (a stopping Slicelet waits for them, as HeldFor promised).
func serveLocal(ctx context.Context, ln net.Listener, api *localAPI, path string) error {
	ln = limitLocal(ln, api.log)
	mux := http.NewServeMux()
	mux.Handle(slicerv1connect.NewSidecarServiceHandler(api, connect.WithReadMaxBytes(localMaxRequestBytes)))
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: localMaxConnStreams}}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		os.Remove(path)
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx) // open WatchRanges streams end with their contexts
	_ = srv.Close()
	<-done
	os.Remove(path)
	return nil
}
