package auth

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/identity"
)

func TestLoadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "tokens")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokens, err := LoadTokenFile(write("# admins\nops 0123456789abcdef0123456789abcdef\n\nci fedcba9876543210fedcba9876543210\n"))
	if err != nil || len(tokens) != 2 || tokens[1].Name != "ci" {
		t.Fatalf("LoadTokenFile = %v, %v", tokens, err)
	}
	if err := ValidateTokens(tokens); err != nil {
		t.Errorf("validateTokens: %v", err)
	}
	for _, tc := range []struct{ body, want string }{
		{"", "holds no token"},
		{"ops\n", `want "NAME SECRET"`},
		{"ops a b\n", `want "NAME SECRET"`},
	} {
		if _, err := LoadTokenFile(write(tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadTokenFile(%q) = %v, want an error with %q", tc.body, err, tc.want)
		}
	}
	if _, err := LoadTokenFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing token file was accepted")
	}
	for _, tc := range []struct {
		tokens []Token
		want   string
	}{
		{[]Token{{"ops", "short"}}, "at least 32"},
		{[]Token{{"ops", strings.Repeat("a", 32)}, {"ops", strings.Repeat("b", 32)}}, "listed twice"},
		{[]Token{{"a,b", strings.Repeat("a", 32)}}, "without spaces or commas"},
	} {
		if err := ValidateTokens(tc.tokens); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateTokens(%v) = %v, want %q", tc.tokens, err, tc.want)
		}
	}
}

func TestTokenLookup(t *testing.T) {
	au := New(true, []Token{{"ops", strings.Repeat("x", 32)}}, nil)
	if name, ok := au.token(strings.Repeat("x", 32)); !ok || name != "ops" {
		t.Errorf("token(right secret) = %q, %v", name, ok)
	}
	for _, s := range []string{"", strings.Repeat("x", 31), strings.Repeat("y", 32)} {
		if name, ok := au.token(s); ok {
			t.Errorf("token(%q) = %q, accepted", s, name)
		}
	}
}

func TestForwardedForRoundTrip(t *testing.T) {
	p := identity.Principal{IDs: []identity.ID{
		{Role: identity.Task, Job: "kv", Task: "kv-0"}, {Role: identity.Admin, Name: "ops"},
	}, Token: "ci"}
	got := parseForwardedFor(ForwardedFor(p))
	if got.String() != p.String() {
		t.Errorf("round trip = %s, want %s", got, p)
	}
}

// FuzzParseForwardedFor checks that no header value panics the parser and
// that what it accepts survives a round trip.
func FuzzParseForwardedFor(f *testing.F) {
	f.Add("spiffe://slicerd/task/kv/kv-0,token:ops")
	f.Add("spiffe://slicerd/admin/a%2Cb,,token:")
	f.Add("token:x,spiffe://other/admin/x,%zz")
	f.Fuzz(func(t *testing.T, h string) {
		p := parseForwardedFor(h)
		if q := parseForwardedFor(ForwardedFor(p)); q.String() != p.String() {
			t.Errorf("round trip of %q: %s then %s", h, p, q)
		}
	})
}

// Refusals counts every refusal and logs the first of each reason at once,
// then at most one line per RefusalLogInterval; handshake errors from the
// HTTP server's error log are recorded, other lines pass through.
func TestRefusalsCountAndLogSparingly(t *testing.T) {
	var buf bytes.Buffer
	r := NewRefusals(slog.New(slog.NewTextHandler(&buf, nil)))
	for range 100 {
		r.recordCall(Caller{Addr: "10.0.0.9:4000"}, connect.NewError(connect.CodeUnauthenticated, errors.New("no certificate")))
		r.recordCall(Caller{Addr: "10.0.0.9:4001"}, connect.NewError(connect.CodePermissionDenied, errors.New("not yours")))
		r.recordCall(Caller{}, connect.NewError(connect.CodeNotFound, errors.New("no such job")))
	}
	var passed []string
	h := HandshakeErrors{Refusals: r, Next: func(line string) { passed = append(passed, line) }}
	fmt.Fprintln(h, "http: TLS handshake error from 10.0.0.7:5555: remote error: tls: bad certificate")
	fmt.Fprintln(h, "http: superfluous response.WriteHeader call")
	if got := [3]uint64{r.Count(Handshake), r.Count(Unauthenticated), r.Count(Denied)}; got != [3]uint64{1, 100, 100} {
		t.Errorf("counts handshake, unauthenticated, denied = %v, want [1 100 100]", got)
	}
	lines := strings.Count(buf.String(), "\n")
	if lines != 3 || !strings.Contains(buf.String(), "remote_addr=10.0.0.7:5555") || !strings.Contains(buf.String(), "tls: bad certificate") {
		t.Errorf("log has %d lines, want 3 (one per reason) naming the address and error:\n%s", lines, buf.String())
	}
	if len(passed) != 1 || !strings.Contains(passed[0], "superfluous") {
		t.Errorf("lines passed on = %q, want the one that is not a handshake error", passed)
	}
	var nilR *Refusals
	nilR.Record(Denied, "", "", nil) // records nothing, does not panic
}

// Only a Distributor's own certificate makes a watch stream a relay's
// (sent first); on an agent that authenticates nobody, anyone may say so.
func TestMayRelay(t *testing.T) {
	of := func(ids ...identity.ID) identity.Principal { return identity.Principal{IDs: ids} }
	dist := identity.ID{Role: identity.Distributor, Node: "d1"}
	for _, tc := range []struct {
		name string
		c    Caller
		want bool
	}{
		{"no authentication", Caller{}, true},
		{"a Distributor", Caller{Enforce: true, Principal: of(dist), Direct: of(dist)}, true},
		{"an agent of several roles", Caller{Enforce: true, Principal: of(identity.ID{Role: identity.Backup, Node: "n"}, dist), Direct: of(identity.ID{Role: identity.Backup, Node: "n"}, dist)}, true},
		{"an Assigner", Caller{Enforce: true, Principal: of(identity.ID{Role: identity.Assigner, Node: "a"}), Direct: of(identity.ID{Role: identity.Assigner, Node: "a"})}, false},
		{"a task", Caller{Enforce: true, Principal: of(identity.ID{Role: identity.Task, Job: "kv", Task: "t0"}), Direct: of(identity.ID{Role: identity.Task, Job: "kv", Task: "t0"})}, false},
		{"a client", Caller{Enforce: true, Principal: of(identity.ID{Role: identity.Client, Job: "kv"}), Direct: of(identity.ID{Role: identity.Client, Job: "kv"})}, false},
		{"an admin token", Caller{Enforce: true, Principal: identity.Principal{Token: "ops"}, Direct: identity.Principal{Token: "ops"}}, false},
		{"anonymous", Caller{Enforce: true}, false},
		// A Principal the sender vouches for is not the sender.
		{"forwarded for a Distributor", Caller{Enforce: true, Principal: of(dist), Direct: of(identity.ID{Role: identity.Assigner, Node: "a"})}, false},
	} {
		if got := MayRelay(tc.c); got != tc.want {
			t.Errorf("%s: MayRelay = %v, want %v", tc.name, got, tc.want)
		}
	}
}
