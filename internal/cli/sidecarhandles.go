package cli

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/slicelet"
)

// Handles over the local API: the application takes a slicelet.Handle
// through the sidecar, which keeps it by number until released.
const (
	// localMaxHandles bounds the handles held at once for the
	// application.
	localMaxHandles = 65_536
	// localMaxHandleWait bounds AcquireHandleRequest.wait_ms.
	localMaxHandleWait = 10 * time.Second
)

// handleTable holds the handles the application took, by number. The
// numbers start at a random point in each sidecar process, so that a
// handle taken before the sidecar restarted is unknown to the new one
// (its CheckHandle and ReleaseHandle answer false) rather than naming a
// handle the new one gave another request.
type handleTable struct {
	mu   sync.Mutex
	next uint64
	held map[uint64]slicelet.Handle
}

// firstHandle is a random handle number below 2^62 (far from wrapping),
// and above 2^32.
func firstHandle() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return binary.LittleEndian.Uint64(b[:])>>2 | 1<<32
}

// add keeps h and returns its number. At the bound it first releases the
// handles whose keys the task no longer owns continuously: their
// application has most likely forgotten them (a request that died), and
// what they would say is already false. It fails when none is.
func (t *handleTable) add(h slicelet.Handle) (uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held == nil {
		t.held = make(map[uint64]slicelet.Handle)
		t.next = firstHandle()
	}
	if len(t.held) >= localMaxHandles {
		for id, old := range t.held {
			if !old.IsAssignedContinuously() {
				old.Release()
				delete(t.held, id)
			}
		}
		if len(t.held) >= localMaxHandles {
			return 0, fmt.Errorf("%d handles are held, the most the sidecar keeps; release handles when their requests end", localMaxHandles)
		}
	}
	t.next++
	t.held[t.next] = h
	return t.next, nil
}

func (t *handleTable) get(id uint64) (slicelet.Handle, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.held[id]
	return h, ok
}

func (t *handleTable) remove(id uint64) (slicelet.Handle, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.held[id]
	delete(t.held, id)
	return h, ok
}

// releaseAll gives up every handle; the sidecar calls it once the
// Slicelet has stopped, which keeps the handles' HeldFor promises until
// then.
func (t *handleTable) releaseAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, h := range t.held {
		h.Release()
		delete(t.held, id)
	}
}

// AcquireHandle implements SidecarService.
func (l *localAPI) AcquireHandle(ctx context.Context, req *connect.Request[slicerv1.AcquireHandleRequest]) (*connect.Response[slicerv1.AcquireHandleResponse], error) {
	wait := time.Duration(req.Msg.GetWaitMs()) * time.Millisecond
	if wait > localMaxHandleWait {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("wait_ms %d is over %d; wait at most %v", req.Msg.GetWaitMs(), localMaxHandleWait.Milliseconds(), localMaxHandleWait))
	}
	var h slicelet.Handle
	if wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, wait)
		h = l.sl.AwaitHandle(wctx, req.Msg.GetKey())
		cancel()
	} else {
		h = l.sl.Handle(req.Msg.GetKey())
	}
	if !h.Owned() {
		return connect.NewResponse(&slicerv1.AcquireHandleResponse{}), nil
	}
	id, err := l.handles.add(h)
	if err != nil {
		h.Release()
		return nil, connect.NewError(connect.CodeResourceExhausted, err)
	}
	return connect.NewResponse(&slicerv1.AcquireHandleResponse{Handle: id, Owned: true, Token: h.Token(),
		ValidForNs: int64(h.ValidFor()), HeldForNs: int64(h.HeldFor())}), nil
}

// CheckHandle implements SidecarService.
func (l *localAPI) CheckHandle(_ context.Context, req *connect.Request[slicerv1.CheckHandleRequest]) (*connect.Response[slicerv1.CheckHandleResponse], error) {
	h, ok := l.handles.get(req.Msg.GetHandle())
	resp := &slicerv1.CheckHandleResponse{}
	if ok && h.IsAssignedContinuously() {
		resp.Continuous, resp.ValidForNs = true, int64(h.ValidFor())
	}
	return connect.NewResponse(resp), nil
}

// ReleaseHandle implements SidecarService.
func (l *localAPI) ReleaseHandle(_ context.Context, req *connect.Request[slicerv1.ReleaseHandleRequest]) (*connect.Response[slicerv1.ReleaseHandleResponse], error) {
	h, ok := l.handles.remove(req.Msg.GetHandle())
	resp := &slicerv1.ReleaseHandleResponse{}
	if ok {
		resp.Continuous = h.IsAssignedContinuously()
		h.Release()
	}
	return connect.NewResponse(resp), nil
}
