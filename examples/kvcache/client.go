package kvcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/slicerd/slicerd/clerk"
)

// Sentinel errors of the client.
var (
	// ErrNoOwner means the assignment names no task for the key, or the
	// owner kept refusing it; wait for slicerd to assign the job's keys.
	ErrNoOwner = errors.New("kvcache: no task owns the key")
	// ErrServer is an unexpected answer from a task.
	ErrServer = errors.New("kvcache: task answered with an error")
)

// Retry policy: a 421 or a refused connection usually means the client's
// assignment is a step behind the tasks'; a few short waits let it catch up.
const (
	maxAttempts  = 6
	firstBackoff = 20 * time.Millisecond
	maxBackoff   = 500 * time.Millisecond
)

// Client reads and writes the cache, routing each key with a Clerk to the
// task that owns it. It is safe for concurrent use.
type Client struct {
	clerk *clerk.Clerk
	hc    *http.Client
}

// NewClient returns a Client routing with c. A nil hc uses
// http.DefaultClient.
func NewClient(c *clerk.Clerk, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{clerk: c, hc: hc}
}

// Owner returns the address of the task the key routes to.
func (c *Client) Owner(key string) (addr string, ok bool) {
	tasks := c.clerk.AssignedTasksString(key)
	if len(tasks) == 0 {
		return "", false
	}
	return tasks[0], true
}

// Get returns the value of key and whether it was present.
func (c *Client) Get(ctx context.Context, key string) ([]byte, bool, error) {
	var val []byte
	found := false
	err := c.do(ctx, http.MethodGet, key, nil, func(resp *http.Response) error {
		switch resp.StatusCode {
		case http.StatusOK:
			b, err := io.ReadAll(io.LimitReader(resp.Body, MaxValueBytes+1))
			if err != nil {
				return err
			}
			val, found = b, true
			return nil
		case http.StatusNotFound:
			return nil
		}
		return statusError(resp)
	})
	return val, found, err
}

// Put stores val under key.
func (c *Client) Put(ctx context.Context, key string, val []byte) error {
	return c.do(ctx, http.MethodPut, key, val, expectNoContent)
}

// Delete removes key.
func (c *Client) Delete(ctx context.Context, key string) error {
	return c.do(ctx, http.MethodDelete, key, nil, expectNoContent)
}

func expectNoContent(resp *http.Response) error {
	if resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusOK {
		return nil
	}
	return statusError(resp)
}

func statusError(resp *http.Response) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return fmt.Errorf("%w: %s: %s", ErrServer, resp.Status, bytes.TrimSpace(msg))
}

// retryable marks a failed attempt worth repeating after a backoff.
type retryable struct{ err error }

func (r retryable) Error() string { return r.err.Error() }
func (r retryable) Unwrap() error { return r.err }

// do sends one request to the key's owner, retrying with backoff while the
// owner refuses the key (421), cannot be reached, or is not yet known.
func (c *Client) do(ctx context.Context, method, key string, body []byte, handle func(*http.Response) error) error {
	select {
	case <-c.clerk.Ready():
	case <-ctx.Done():
		return fmt.Errorf("kvcache: %s %q: waiting for the first assignment: %w", method, key, ctx.Err())
	}
	backoff := firstBackoff
	var last error
	for attempt := 1; ; attempt++ {
		err := c.once(ctx, method, key, body, handle)
		var r retryable
		if !errors.As(err, &r) {
			return err
		}
		last = r.err
		if attempt == maxAttempts {
			break
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("kvcache: %s %q: %w (last attempt: %w)", method, key, ctx.Err(), last)
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
	return fmt.Errorf("%w: %s %q gave up after %d attempts (last: %w); slicerd may still be moving the key, retry later", ErrNoOwner, method, key, maxAttempts, last)
}

func (c *Client) once(ctx context.Context, method, key string, body []byte, handle func(*http.Response) error) error {
	addr, ok := c.Owner(key)
	if !ok {
		return retryable{errors.New("the assignment names no task for it")}
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+"/kv/"+url.PathEscape(key), rd)
	if err != nil {
		return fmt.Errorf("kvcache: %s %q: %w", method, key, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("kvcache: %s %q: %w", method, key, ctx.Err())
		}
		// The owner may have just stopped; the next assignment drops it.
		return retryable{fmt.Errorf("task %s unreachable: %w", addr, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusMisdirectedRequest {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return retryable{fmt.Errorf("task %s does not own the key (421 Misdirected Request)", addr)}
	}
	if err := handle(resp); err != nil {
		return fmt.Errorf("kvcache: %s %q at %s: %w", method, key, addr, err)
	}
	return nil
}
