package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/connlimit"
	"github.com/slicerd/slicerd/slicelet"
)

// State handoff through the sidecar: the application implements
// slicer.v1.TaskStateService on a Unix socket (--app-state-socket); the
// sidecar's Slicelet exports and imports through it, and serves the job's
// other tasks HandoffService on its own listener (--handoff-addr), which
// it advertises in gossip, since the application's address serves the
// application's protocol.
const (
	// appImportTimeout bounds one ImportState call to the application.
	appImportTimeout = 10 * time.Second
	// handoffMaxConns bounds the connections to the handoff listener:
	// the job's tasks each need one (HTTP/2 carries their fetches).
	handoffMaxConns, handoffMaxConnsPerIP = 256, 64
	// localMaxStateWait bounds AwaitStateRequest.wait_ms.
	localMaxStateWait = 10 * time.Second
)

// appStateClient calls the application's TaskStateService on its Unix
// socket. Each connection's peer must be the sidecar's user or root, as
// the local API asks of its callers.
func appStateClient(path string) slicerv1connect.TaskStateServiceClient {
	uid := os.Getuid()
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
			if err != nil {
				return nil, err
			}
			if peer, err := peerUID(c.(*net.UnixConn)); err != nil || (peer != uid && peer != 0) {
				c.Close()
				return nil, fmt.Errorf("the process serving %s is not the sidecar's user (uid %d); run the application as that user", path, uid)
			}
			return c, nil
		},
		MaxIdleConnsPerHost: 8,
	}}
	return slicerv1connect.NewTaskStateServiceClient(hc, "http://application", connect.WithProtoJSON(),
		connect.WithReadMaxBytes(2<<20), connect.WithSendMaxBytes(4<<20))
}

// withAppState sets cfg's ExportState and ImportStates to call the
// application's TaskStateService at path.
func withAppState(cfg *slicelet.Config, path string, log *slog.Logger) {
	app := appStateClient(path)
	cfg.ExportState = func(ctx context.Context, start, end assign.SliceKey, emit func(key, value []byte) error) error {
		stream, err := app.ExportState(ctx, connect.NewRequest(&slicerv1.ExportStateRequest{Start: uint64(start), End: uint64(end)}))
		if err != nil {
			return fmt.Errorf("the application's ExportState: %w", err)
		}
		defer stream.Close()
		for stream.Receive() {
			for _, e := range stream.Msg().GetEntries() {
				if err := emit(e.GetKey(), e.GetValue()); err != nil {
					return err
				}
			}
		}
		if err := stream.Err(); err != nil {
			return fmt.Errorf("the application's ExportState: %w", err)
		}
		return nil
	}
	cfg.ImportStates = func(entries []slicelet.StateEntry) {
		req := &slicerv1.ImportStateRequest{Entries: make([]*slicerv1.StateEntry, len(entries))}
		for i, e := range entries {
			req.Entries[i] = &slicerv1.StateEntry{Key: e.Key, Value: e.Value}
		}
		ctx, cancel := context.WithTimeout(context.Background(), appImportTimeout)
		defer cancel()
		// An application restarting has no socket for a moment: try
		// again, backing off, until the timeout.
		for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
			_, err := app.ImportState(ctx, connect.NewRequest(req))
			if err == nil {
				return
			}
			if connect.CodeOf(err) != connect.CodeUnavailable || ctx.Err() != nil {
				log.Warn("sidecar: the application's ImportState failed; those keys start cold", "entries", len(entries), "err", err)
				return
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
	}
}

// serveHandoff serves sl's HandoffService on ln until ctx ends: over TLS
// with the task's certificate when tlsConfig is set (callers must show a
// task certificate of the job, which the handler checks), else h2c.
func serveHandoff(ctx context.Context, ln net.Listener, sl *slicelet.Slicelet, tlsConfig *tls.Config, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle(sl.HandoffHandler())
	protocols := new(http.Protocols)
	if tlsConfig != nil {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	ln = connlimit.Wrap(ln, connlimit.Limits{Max: handoffMaxConns, MaxPerIP: handoffMaxConnsPerIP, LogInterval: 10 * time.Second, Logger: log})
	srv := &http.Server{Handler: mux, Protocols: protocols, TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	done := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			done <- srv.ServeTLS(ln, "", "") // the server's own TLS, so that it sees the handshake's protocol
			return
		}
		done <- srv.Serve(ln)
	}()
	select {
	case err := <-done:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("handoff server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-done
	return nil
}

// AwaitState implements SidecarService.
func (l *localAPI) AwaitState(ctx context.Context, req *connect.Request[slicerv1.AwaitStateRequest]) (*connect.Response[slicerv1.AwaitStateResponse], error) {
	wait := time.Duration(req.Msg.GetWaitMs()) * time.Millisecond
	if wait > localMaxStateWait {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("wait_ms %d is over %d; wait at most %v", req.Msg.GetWaitMs(), localMaxStateWait.Milliseconds(), localMaxStateWait))
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := l.sl.AwaitState(wctx, req.Msg.GetKey())
	return connect.NewResponse(&slicerv1.AwaitStateResponse{Done: err == nil}), nil
}
