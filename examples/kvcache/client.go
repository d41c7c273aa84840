package kvcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
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
	clerk  *clerk.Clerk
	hc     *http.Client
	scheme string // "https" when the Clerk has TLS

	// Every request sent to a task, and those it satisfied; see Attempts.
	attempts, satisfied atomic.Uint64
}

// Attempts reports how many requests the client sent to tasks and how many
// of them a task satisfied: the others were refused (421, 409, 5xx) or
// found no task, and were retried. satisfied/attempts is the fraction of
// requests satisfied, as Slicer's consistency benchmark counts it.
func (c *Client) Attempts() (attempts, satisfied uint64) {
	return c.attempts.Load(), c.satisfied.Load()
}

// NewClient returns a Client routing with c. A nil hc uses
// http.DefaultClient. When c has TLS, the client talks HTTPS with c's
// certificate and replaces hc's transport with one that accepts a task only
// if its certificate names the task the assignment places at the address
// dialled (clerk.Clerk.TaskTLS); hc's other settings, such as its timeout,
// are kept.
func NewClient(c *clerk.Clerk, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	if !c.TLS() {
		return &Client{clerk: c, hc: hc, scheme: "http"}
	}
	verified := *hc
	verified.Transport = &http.Transport{
		ForceAttemptHTTP2: true,
		MaxIdleConns:      100,
		IdleConnTimeout:   90 * time.Second,
		DialTLSContext:    c.DialTaskTLS,
	}
	return &Client{clerk: c, hc: &verified, scheme: "https"}
}

// Close closes the idle connections of a client that made its own
// transport (with TLS); a Client needs no other cleanup.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Owner returns the address of a task the key routes to. When slicerd
// replicated the key's slice, it is one of the replicas at random, so that
// reads share a hot key's load.
func (c *Client) Owner(key string) (addr string, ok bool) {
	return c.clerk.PickTaskString(key)
}

// Get returns the value of key and whether it was present, reading from
// one of the tasks that serve it.
func (c *Client) Get(ctx context.Context, key string) ([]byte, bool, error) {
	var val []byte
	found := false
	err := c.do(ctx, http.MethodGet, key, nil, false, func(resp *http.Response) error {
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

// Put stores val under key on every task that serves it, so a read from
// any replica finds it.
func (c *Client) Put(ctx context.Context, key string, val []byte) error {
	return c.do(ctx, http.MethodPut, key, val, true, expectNoContent)
}

// Delete removes key from every task that serves it.
func (c *Client) Delete(ctx context.Context, key string) error {
	return c.do(ctx, http.MethodDelete, key, nil, true, expectNoContent)
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

// do sends the request to one of the key's tasks, or to all of them when
// all is set (writes, which are idempotent and so safe to repeat on every
// replica), retrying with backoff while a task refuses the key (421),
// cannot be reached, or is not yet known.
func (c *Client) do(ctx context.Context, method, key string, body []byte, all bool, handle func(*http.Response) error) error {
	if err := ctx.Err(); err != nil {
		// Both channels below would be ready: say what happened.
		return fmt.Errorf("kvcache: %s %q: not sent: %w", method, key, err)
	}
	select {
	case <-c.clerk.Ready():
	case <-ctx.Done():
		return fmt.Errorf("kvcache: %s %q: waiting for the first assignment: %w", method, key, ctx.Err())
	}
	backoff := firstBackoff
	var last error
	for attempt := 1; ; attempt++ {
		var err error
		if all {
			err = c.toAll(ctx, method, key, body, handle)
		} else if addr, ok := c.Owner(key); ok {
			err = c.once(ctx, addr, method, key, body, handle)
		} else {
			err = retryable{errors.New("the assignment names no task for it")}
		}
		var r retryable
		if !errors.As(err, &r) {
			return err
		}
		last = r.err
		if attempt == maxAttempts {
			break
		}
		if err := pause(ctx, backoff); err != nil {
			return fmt.Errorf("kvcache: %s %q: %w (last attempt: %w)", method, key, err, last)
		}
		backoff = min(2*backoff, maxBackoff)
	}
	return fmt.Errorf("%w: %s %q gave up after %d attempts (last: %w); slicerd may still be moving the key, retry later", ErrNoOwner, method, key, maxAttempts, last)
}

// pause waits d, or until ctx ends (its error), between two attempts.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// toAll sends the request to every task of the key's slice in turn and
// stops at the first failure.
func (c *Client) toAll(ctx context.Context, method, key string, body []byte, handle func(*http.Response) error) error {
	addrs := c.clerk.AssignedTasksString(key)
	sent := false
	for _, addr := range addrs {
		if addr == "" {
			continue
		}
		if err := c.once(ctx, addr, method, key, body, handle); err != nil {
			return err
		}
		sent = true
	}
	if !sent {
		return retryable{errors.New("the assignment names no task for it")}
	}
	return nil
}

func (c *Client) once(ctx context.Context, addr, method, key string, body []byte, handle func(*http.Response) error) error {
	c.attempts.Add(1)
	err := c.send(ctx, addr, method, key, body, handle)
	if err == nil {
		c.satisfied.Add(1)
	}
	return err
}

func (c *Client) send(ctx context.Context, addr, method, key string, body []byte, handle func(*http.Response) error) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.scheme+"://"+addr+"/kv/"+url.PathEscape(key), rd)
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
