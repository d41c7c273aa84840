package hostcheck

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestAllowed(t *testing.T) {
	c := New(Options{Allowed: []string{"slicerd.example.com", "*.svc.internal", "Node-1."}})
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.0.0.1:7070", true},
		{"10.1.2.3:80", true},
		{"[::1]:7070", true},
		{"[::1]", true},
		{"::1", true},
		{"[fe80::1%eth0]:7070", true},
		{"localhost", true},
		{"localhost:7070", true},
		{"LOCALHOST.", true},
		{"", true},
		{"slicerd.example.com", true},
		{"slicerd.example.com:7070", true},
		{"SLICERD.EXAMPLE.COM.:7070", true},
		{"a.svc.internal:7070", true},
		{"a.b.svc.internal", true},
		{"svc.internal", false},
		{"node-1", true},
		{"evil.example", false},
		{"evil.example:7070", false},
		{"localhost.evil.example", false},
		{"127.0.0.1.evil.example", false},
		{"slicerd.example.com.evil.example", false},
		{"evil.example:x", false},
		{"[evil.example]:7070", false},
		{"[::1", false},
		{"user@localhost", false},
	} {
		if got := c.Allowed(tc.host); got != tc.want {
			t.Errorf("Allowed(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
	if !New(Options{Allowed: []string{Any}}).Allowed("evil.example") {
		t.Error("Any does not allow evil.example")
	}
}

func TestValidateAllowed(t *testing.T) {
	for _, ok := range []string{"*", "slicerd.example.com", "*.example.com", "node_1", "10.0.0.1", "::1", "host."} {
		if err := ValidateAllowed(ok); err != nil {
			t.Errorf("ValidateAllowed(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "*.", "host:7070", "http://host", "a..b", "a b", "**", "*.*"} {
		if err := ValidateAllowed(bad); err == nil {
			t.Errorf("ValidateAllowed(%q) = nil, want an error", bad)
		}
	}
}

// A refused plain request gets 421 and a message naming the host and the
// flag; a Connect call gets PERMISSION_DENIED. Lines are rate-limited and
// Close tells the rest.
func TestWrapRefusesAndLogsRateLimited(t *testing.T) {
	var logs bytes.Buffer
	c := New(Options{Flag: "--allowed-hosts", LogInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	h := c.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))

	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://evil.example/x", nil))
		if rec.Code != http.StatusMisdirectedRequest || !strings.Contains(rec.Body.String(), `"evil.example"`) ||
			!strings.Contains(rec.Body.String(), "--allowed-hosts") {
			t.Fatalf("plain request: %d %q; want 421 naming the host and the flag", rec.Code, rec.Body)
		}
	}
	req := httptest.NewRequest(http.MethodPost, "http://evil.example/slicer.v1.JobService/GetJob", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if !strings.Contains(rec.Body.String(), `"permission_denied"`) || !strings.Contains(rec.Body.String(), "--allowed-hosts") {
		t.Errorf("Connect request: %d %q; want a permission_denied error naming the flag", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:7070/x", nil))
	if rec.Code != http.StatusNoContent {
		t.Errorf("request to 127.0.0.1: %d, want it passed on", rec.Code)
	}

	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "refused=1 ") {
		t.Fatalf("after 4 refusals within the interval, log %q; want one line counting the first", logs.String())
	}
	c.Close()
	if n := strings.Count(logs.String(), "level=WARN"); n != 2 || !strings.Contains(logs.String(), "refused=3 ") ||
		!strings.Contains(logs.String(), "refused_total=4") {
		t.Errorf("after Close, log %q; want a second line counting the other 3", logs.String())
	}
	if c.Refused() != 4 {
		t.Errorf("Refused() = %d, want 4", c.Refused())
	}
}

// ParseHost never panics, and what it accepts is a name or address that
// cannot smuggle a different host: no port, no brackets, no separators.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"127.0.0.1:7070", "[::1]:7070", "::1", "localhost", "Evil.Example.:80",
		"[::1", "a:b:c", "host:", "[fe80::1%eth0]", "", ":", "[]:1", "a@b"} {
		f.Add(s)
	}
	c := New(Options{Allowed: []string{"slicerd.example.com"}})
	f.Fuzz(func(t *testing.T, hostport string) {
		host, ok := ParseHost(hostport)
		allowed := c.Allowed(hostport)
		if !ok {
			if allowed && hostport != "" {
				t.Fatalf("Allowed(%q) with an unparsable host", hostport)
			}
			return
		}
		if host == "" || strings.ContainsAny(host, "[]/@ ") {
			t.Fatalf("ParseHost(%q) = %q", hostport, host)
		}
		if _, err := netip.ParseAddr(host); err != nil && strings.Contains(host, ":") {
			t.Fatalf("ParseHost(%q) = %q: a port left in a name", hostport, host)
		}
		if _, err := netip.ParseAddr(host); err != nil && (host != strings.ToLower(host) || strings.HasSuffix(host, ".")) {
			t.Fatalf("ParseHost(%q) = %q, not normalized", hostport, host)
		}
		if allowed {
			if _, err := netip.ParseAddr(host); err != nil && host != "localhost" && host != "slicerd.example.com" {
				t.Fatalf("Allowed(%q): host %q is neither an address, localhost nor allowed", hostport, host)
			}
		}
	})
}
