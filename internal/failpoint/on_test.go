//go:build failpoints

package failpoint

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

func TestError(t *testing.T) {
	t.Cleanup(func() { Disable("p") })
	ctx := context.Background()
	if err := Hit(ctx, "p"); err != nil {
		t.Fatalf("unarmed Hit = %v", err)
	}
	if err := Enable("p", "2*error"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := Hit(ctx, "p"); !errors.Is(err, ErrInjected) {
			t.Fatalf("Hit %d = %v, want ErrInjected", i, err)
		}
	}
	if err := Hit(ctx, "p"); err != nil || armed.Load() != 0 {
		t.Fatalf("third Hit = %v (armed %d), want nil: 2* fires twice", err, armed.Load())
	}
}

// A pause holds the caller until its context ends.
func TestPauseEndsWithContext(t *testing.T) {
	t.Cleanup(func() { Disable("p") })
	if err := Enable("p", "pause(1h)"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- Hit(ctx, "p") }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Hit = %v, want context.Canceled", err)
	}
}

// Points are armed and disarmed while others hit them.
func TestConcurrent(t *testing.T) {
	t.Cleanup(func() { Disable("p") })
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				if err := Hit(context.Background(), "p"); err != nil && !errors.Is(err, ErrInjected) {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 1000 {
		Enable("p", "error")
		Disable("p")
	}
	wg.Wait()
	if armed.Load() != 0 {
		t.Fatalf("armed = %d after every point was disarmed", armed.Load())
	}
}

func TestParse(t *testing.T) {
	for _, bad := range []string{"", "pause", "pause(x)", "0*error", "error(x)", "crash(", "explode"} {
		if err := Enable("p", bad); err == nil {
			Disable("p")
			t.Errorf("Enable(%q) accepted", bad)
		}
	}
	if err := fromEnv("a=1*pause(5ms); b=error;;"); err != nil {
		t.Fatal(err)
	}
	defer Disable("a")
	defer Disable("b")
	if got := list(); got != "a=1*pause(5ms)\nb=error\n" {
		t.Errorf("list = %q", got)
	}
}

func TestControlEndpoint(t *testing.T) {
	t.Cleanup(func() { Disable("guard/x") })
	srv := httptest.NewServer(handler())
	defer srv.Close()
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := do("PUT", "/guard/x", "error"); code != 200 {
		t.Fatalf("PUT: %d", code)
	}
	if _, got := do("GET", "/", ""); got != "guard/x=error\n" {
		t.Errorf("GET / = %q", got)
	}
	if code, _ := do("PUT", "/guard/x", "bogus"); code != 400 {
		t.Errorf("PUT bogus: %d, want 400", code)
	}
	do("DELETE", "/guard/x", "")
	if err := Hit(context.Background(), "guard/x"); err != nil {
		t.Errorf("Hit after DELETE = %v", err)
	}
	if err := serve("0.0.0.0:0"); err == nil {
		t.Error("serve accepted a non-loopback address")
	}
}

// crash exits the process with CrashExit, after saying which point fired.
func TestCrash(t *testing.T) {
	if os.Getenv("FAILPOINT_CRASH_CHILD") != "" {
		Hit(context.Background(), "c")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrash$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CRASH_CHILD=1", Env+"=c=crash")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != CrashExit || !strings.Contains(string(out), "failpoint: c fired: crash") {
		t.Fatalf("child: %v, output %q; want exit %d after the fired line", err, out, CrashExit)
	}
}

func BenchmarkHitUnarmed(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		_ = Hit(ctx, "guard/before-recall-guard")
	}
}
