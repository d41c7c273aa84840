package startgate

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server serves h behind g on a real HTTP server.
func server(t *testing.T, g *Gate, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(g.Wrap(h))
	t.Cleanup(srv.Close)
	return srv
}

// get sends a GET for path to srv and returns its status, or 0 and the
// error.
func get(ctx context.Context, srv *httptest.Server, path string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// A request beyond the limit waits until the starting handler returns;
// it is not run before.
func TestPlaceComesBackWhenTheHandlerReturns(t *testing.T) {
	g := New(1, time.Hour)
	entered := make(chan string, 2)
	answer := make(chan struct{})
	srv := server(t, g, func(w http.ResponseWriter, r *http.Request) {
		entered <- r.URL.Query().Get("n")
		if r.URL.Query().Get("n") == "1" {
			<-answer
		}
	})
	ctx := t.Context()
	errs := make(chan error, 2)
	for _, n := range []string{"1", "2"} {
		go func() {
			_, err := get(ctx, srv, "/?n="+n)
			errs <- err
		}()
		if n == "1" {
			if got := <-entered; got != "1" {
				t.Fatalf("handler %s entered first; want 1", got)
			}
		}
	}
	select {
	case n := <-entered:
		t.Fatalf("handler %s started while the only place was held", n)
	case <-time.After(50 * time.Millisecond):
	}
	if got := g.Starting(); got != 1 {
		t.Errorf("Starting() = %d; want 1", got)
	}
	close(answer)
	if got := <-entered; got != "2" {
		t.Fatalf("handler %s entered; want 2", got)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := g.Parked(); got != 0 {
		t.Errorf("Parked() = %d; want 0", got)
	}
}

// Waiting gives the place back without answering.
func TestWaitingGivesThePlaceBack(t *testing.T) {
	g := New(1, time.Hour)
	release := make(chan struct{})
	srv := server(t, g, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			Waiting(r.Context())
			Waiting(r.Context()) // a second call does nothing
			<-release
		}
	})
	waited := make(chan error, 1)
	go func() {
		_, err := get(t.Context(), srv, "/wait")
		waited <- err
	}()
	// The second request gets through while the first still waits.
	if code, err := get(t.Context(), srv, "/"); err != nil || code != http.StatusOK {
		t.Fatalf("second request: %d, %v", code, err)
	}
	close(release)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if got := g.Starting(); got != 0 {
		t.Errorf("Starting() = %d after every handler returned; want 0", got)
	}
}

// A handler that holds its place for the park time without answering
// or waiting stops counting, and the next request starts.
func TestSlowHandlerIsParked(t *testing.T) {
	g := New(1, 10*time.Millisecond)
	release := make(chan struct{})
	entered := make(chan struct{})
	srv := server(t, g, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
	})
	slow := make(chan error, 1)
	go func() {
		_, err := get(t.Context(), srv, "/slow")
		slow <- err
	}()
	<-entered
	if code, err := get(t.Context(), srv, "/"); err != nil || code != http.StatusOK {
		t.Fatalf("request behind a slow handler: %d, %v", code, err)
	}
	// The slow handler was parked; on a busy machine the quick one may
	// have been too.
	if got := g.Parked(); got < 1 {
		t.Errorf("Parked() = %d; want at least 1, the slow handler", got)
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if got := g.Starting(); got != 0 {
		t.Errorf("Starting() = %d; want 0", got)
	}
}

// A request whose context ends while it waits for a place never reaches
// its handler, and is answered 503.
func TestCanceledWhileWaiting(t *testing.T) {
	g := New(1, time.Hour)
	g.sem <- struct{}{} // the only place is held
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	reached := false
	rec := httptest.NewRecorder()
	g.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true })).
		ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
	if reached {
		t.Error("the handler ran although its request was canceled while it waited")
	}
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("status %d; want 503", rec.Code)
	}
	// Only the place held from the start is taken: the canceled request
	// took none.
	if got := g.Starting(); got != 1 {
		t.Errorf("Starting() = %d; want 1", got)
	}
}

func TestNewRefusesNoLimit(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(0, 0) did not panic")
		}
	}()
	New(0, 0)
}

// A handler waiting for a request body its client has not sent gives its
// place back, and is not counted as parked.
func TestSlowBodyGivesThePlaceBack(t *testing.T) {
	g := New(1, time.Hour)
	read := make(chan string, 1)
	entered := make(chan struct{})
	srv := server(t, g, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/upload" {
			close(entered)
			b, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("read body: %v", err)
			}
			read <- string(b)
		}
	})
	pr, pw := io.Pipe()
	uploaded := make(chan error, 1)
	go func() {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/upload", pr)
		if err == nil {
			var resp *http.Response
			if resp, err = srv.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}
		uploaded <- err
	}()
	// The upload's handler holds the only place until it waits for the
	// body; then this request starts.
	<-entered
	if code, err := get(t.Context(), srv, "/"); err != nil || code != http.StatusOK {
		t.Fatalf("request beside a slow upload: %d, %v", code, err)
	}
	if _, err := pw.Write([]byte("late")); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if got := <-read; got != "late" {
		t.Errorf("body %q; want late", got)
	}
	if err := <-uploaded; err != nil {
		t.Fatal(err)
	}
	if got := g.Parked(); got != 0 {
		t.Errorf("Parked() = %d; want 0: waiting for a body is not a slow handler", got)
	}
}
