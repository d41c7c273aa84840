//go:build failpoints

package failpoint

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Compiled reports whether this binary has failpoints.
const Compiled = true

var (
	armed  atomic.Int32 // points with an action; Hit's only cost while 0
	mu     sync.Mutex
	points = map[string]*action{}
)

type action struct {
	spec  string
	kind  string
	pause time.Duration
	left  int // fires left; -1: unbounded
}

// Hit runs the action armed at the point name, if any: it returns an
// error wrapping ErrInjected for error, waits for pause (nil, or ctx's
// error if ctx ends first), and does not return for crash.
func Hit(ctx context.Context, name string) error {
	if armed.Load() == 0 {
		return nil
	}
	mu.Lock()
	a := points[name]
	if a == nil {
		mu.Unlock()
		return nil
	}
	if a.left > 0 {
		a.left--
		if a.left == 0 {
			delete(points, name)
			armed.Add(-1)
		}
	}
	kind, pause, spec := a.kind, a.pause, a.spec
	mu.Unlock()
	fmt.Fprintf(os.Stderr, "failpoint: %s fired: %s\n", name, spec)
	switch kind {
	case "pause":
		t := time.NewTimer(pause)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	case "error":
		return fmt.Errorf("%w at %s", ErrInjected, name)
	case "crash":
		os.Exit(CrashExit)
	case "stop":
		stopSelf()
	}
	return nil
}

// Enable arms the point name with action (see the package comment),
// replacing what it had.
func Enable(name, spec string) error {
	a, err := parse(spec)
	if err != nil {
		return fmt.Errorf("failpoint %s: %w", name, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := points[name]; !ok {
		armed.Add(1)
	}
	points[name] = a
	if a.kind == "off" {
		delete(points, name)
		armed.Add(-1)
	}
	return nil
}

// Disable disarms the point name.
func Disable(name string) {
	mu.Lock()
	defer mu.Unlock()
	if _, ok := points[name]; ok {
		delete(points, name)
		armed.Add(-1)
	}
}

func parse(spec string) (*action, error) {
	a := &action{spec: spec, left: -1}
	s := strings.TrimSpace(spec)
	if n, rest, ok := strings.Cut(s, "*"); ok {
		k, err := strconv.Atoi(n)
		if err != nil || k < 1 {
			return nil, fmt.Errorf("bad count %q in %q: want N* with N ≥ 1", n, spec)
		}
		a.left, s = k, rest
	}
	arg := ""
	if i := strings.IndexByte(s, '('); i >= 0 {
		if !strings.HasSuffix(s, ")") {
			return nil, fmt.Errorf("unclosed argument in %q", spec)
		}
		s, arg = s[:i], s[i+1:len(s)-1]
	}
	a.kind = s
	switch s {
	case "pause":
		d, err := time.ParseDuration(arg)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("pause wants a duration, as pause(2s): %q", spec)
		}
		a.pause = d
	case "error", "crash", "stop", "off":
		if arg != "" {
			return nil, fmt.Errorf("%s takes no argument: %q", s, spec)
		}
	default:
		return nil, fmt.Errorf("unknown action %q: want pause(D), error, crash, stop or off", spec)
	}
	return a, nil
}

// list returns the armed points, one "name=action" a line, sorted.
func list() string {
	mu.Lock()
	defer mu.Unlock()
	var lines []string
	for n, a := range points {
		lines = append(lines, n+"="+a.spec+"\n")
	}
	slices.Sort(lines)
	return strings.Join(lines, "")
}

// fromEnv arms the points of spec, "name=action;name=action".
func fromEnv(spec string) error {
	for term := range strings.SplitSeq(spec, ";") {
		if strings.TrimSpace(term) == "" {
			continue
		}
		name, act, ok := strings.Cut(term, "=")
		if !ok {
			return fmt.Errorf("%s: %q is not name=action", Env, term)
		}
		if err := Enable(strings.TrimSpace(name), act); err != nil {
			return fmt.Errorf("%s: %w", Env, err)
		}
	}
	return nil
}

// handler serves the control endpoint: PUT /NAME with the action as the
// body arms a point, DELETE /NAME disarms it, GET / lists them.
func handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		switch {
		case r.Method == http.MethodGet && name == "":
			fmt.Fprint(w, list())
		case r.Method == http.MethodPut && name != "":
			body, err := io.ReadAll(io.LimitReader(r.Body, 256))
			if err == nil {
				err = Enable(name, string(body))
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
			}
		case r.Method == http.MethodDelete && name != "":
			Disable(name)
		default:
			http.Error(w, "GET /, PUT /NAME (body: action) or DELETE /NAME", http.StatusMethodNotAllowed)
		}
	})
}

// serve opens the control endpoint on addr, which must be a loopback
// address; it serves for the life of the process.
func serve(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: %w", AddrEnv, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s: %q is not a loopback address", AddrEnv, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", AddrEnv, err)
	}
	fmt.Fprintf(os.Stderr, "failpoint: control endpoint on http://%s/\n", ln.Addr())
	// It serves for the life of the process (a test bed's), bounded like
	// any slicerd listener against a client that opens and stalls.
	srv := &http.Server{Handler: handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second,
		WriteTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 4 << 10}
	go srv.Serve(ln)
	return nil
}

// A failpoints build that cannot arm what it was asked to refuses to run
// rather than run without its faults.
func init() {
	if spec := os.Getenv(Env); spec != "" {
		if err := fromEnv(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	if addr := os.Getenv(AddrEnv); addr != "" {
		if err := serve(addr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
}
