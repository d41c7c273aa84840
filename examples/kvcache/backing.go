package kvcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
)

// ErrStaleToken is the backing store's refusal of a write whose fencing
// token is below the highest one written for the key: the writer is no
// longer the key's owner.
var ErrStaleToken = errors.New("kvcache: stale fencing token")

// Backing is the storage a strongly consistent cache writes through to.
// Put refuses, with ErrStaleToken, a write whose token is below the
// highest token already written for the key: that is what makes a former
// owner's late write harmless (docs/consistency.md).
type Backing interface {
	Get(ctx context.Context, key string) (val []byte, found bool, err error)
	Put(ctx context.Context, key string, val []byte, token uint64) error
}

// MemBacking is a Backing in memory, safe for concurrent use.
type MemBacking struct {
	mu      sync.Mutex
	entries map[string]backed
	refused uint64
}

type backed struct {
	val   []byte
	token uint64
}

// NewMemBacking returns an empty MemBacking.
func NewMemBacking() *MemBacking { return &MemBacking{entries: make(map[string]backed)} }

// Get implements Backing.
func (m *MemBacking) Get(_ context.Context, key string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	return e.val, ok, nil
}

// Put implements Backing.
func (m *MemBacking) Put(_ context.Context, key string, val []byte, token uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[key]; ok && token < e.token {
		m.refused++
		return fmt.Errorf("%w: key %q was written with token %d, this write has %d", ErrStaleToken, key, e.token, token)
	}
	m.entries[key] = backed{val: bytes.Clone(val), token: token}
	return nil
}

// Refused counts the writes refused for a stale token.
func (m *MemBacking) Refused() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refused
}

// BackingHandler serves a Backing over HTTP, as a database shared by the
// cache's tasks: GET /backing/{key}, and PUT /backing/{key}?token=N, which
// answers 409 Conflict for a stale token.
func BackingHandler(b Backing) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /backing/{key}", func(w http.ResponseWriter, r *http.Request) {
		val, ok, err := b.Get(r.Context(), r.PathValue("key"))
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case !ok:
			http.Error(w, "kvcache: not in the backing store", http.StatusNotFound)
		default:
			w.Write(val)
		}
	})
	mux.HandleFunc("PUT /backing/{key}", func(w http.ResponseWriter, r *http.Request) {
		token, err := strconv.ParseUint(r.URL.Query().Get("token"), 10, 64)
		if err != nil {
			http.Error(w, "kvcache: token must be an unsigned integer", http.StatusBadRequest)
			return
		}
		val, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxValueBytes))
		if err != nil {
			http.Error(w, "kvcache: reading the value: "+err.Error(), http.StatusBadRequest)
			return
		}
		err = b.Put(r.Context(), r.PathValue("key"), val, token)
		switch {
		case errors.Is(err, ErrStaleToken):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	return mux
}

// HTTPBacking is a Backing served by BackingHandler at a base URL.
type HTTPBacking struct {
	Base   string
	Client *http.Client
}

// Get implements Backing.
func (h HTTPBacking) Get(ctx context.Context, key string) ([]byte, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.Base+"/backing/"+url.PathEscape(key), nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		val, err := io.ReadAll(io.LimitReader(resp.Body, MaxValueBytes+1))
		return val, err == nil, err
	case http.StatusNotFound:
		return nil, false, nil
	}
	return nil, false, statusError(resp)
}

// Put implements Backing.
func (h HTTPBacking) Put(ctx context.Context, key string, val []byte, token uint64) error {
	u := h.Base + "/backing/" + url.PathEscape(key) + "?token=" + strconv.FormatUint(token, 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(val))
	if err != nil {
		return err
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil
	case http.StatusConflict:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("%w: %s", ErrStaleToken, bytes.TrimSpace(msg))
	}
	return statusError(resp)
}
