package identity_test

import (
	"crypto/x509"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/slicerd/slicerd/identity"
)

func TestParseRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		uri string
		id  identity.ID
	}{
		{"spiffe://slicerd/assigner/n1", identity.ID{Role: identity.Assigner, Node: "n1"}},
		{"spiffe://slicerd/distributor/n2", identity.ID{Role: identity.Distributor, Node: "n2"}},
		{"spiffe://slicerd/backup/n3", identity.ID{Role: identity.Backup, Node: "n3"}},
		{"spiffe://slicerd/task/kv/kv-0", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-0"}},
		{"spiffe://slicerd/task/kv/Host:7001", identity.ID{Role: identity.Task, Job: "kv", Task: "Host:7001"}},
		{"spiffe://slicerd/task/kv/%2A", identity.ID{Role: identity.Task, Job: "kv", Task: identity.Any}},
		{"spiffe://slicerd/client/kv", identity.ID{Role: identity.Client, Job: "kv"}},
		{"spiffe://slicerd/client/%2A", identity.ID{Role: identity.Client, Job: identity.Any}},
		{"spiffe://slicerd/admin/ops", identity.ID{Role: identity.Admin, Name: "ops"}},
		// Gossip node names and admin names may hold any character; they
		// are escaped so that each stays one path segment.
		{"spiffe://slicerd/assigner/rack%2F1", identity.ID{Role: identity.Assigner, Node: "rack/1"}},
		{"spiffe://slicerd/assigner/host%20a", identity.ID{Role: identity.Assigner, Node: "host a"}},
		{"spiffe://slicerd/assigner/50%25", identity.ID{Role: identity.Assigner, Node: "50%"}},
		{"spiffe://slicerd/backup/a%3Fb%23c", identity.ID{Role: identity.Backup, Node: "a?b#c"}},
		{"spiffe://slicerd/distributor/%C3%A9t%C3%A9", identity.ID{Role: identity.Distributor, Node: "été"}},
		{"spiffe://slicerd/admin/alice@example.com", identity.ID{Role: identity.Admin, Name: "alice@example.com"}},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			got, err := identity.Parse(tc.uri)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.uri, err)
			}
			if got != tc.id {
				t.Fatalf("Parse(%q) = %+v, want %+v", tc.uri, got, tc.id)
			}
			back, err := identity.Parse(tc.id.String())
			if err != nil {
				t.Fatalf("Parse(%q) of the ID's own URI: %v", tc.id.String(), err)
			}
			if back != tc.id {
				t.Fatalf("ID %+v written as %q parses back as %+v", tc.id, tc.id.String(), back)
			}
			// The written form is a single URI that a certificate can carry.
			u, err := url.Parse(tc.id.String())
			if err != nil || u.Scheme != "spiffe" || u.Host != identity.TrustDomain {
				t.Fatalf("URI %q: %v, %+v", tc.id.String(), err, u)
			}
		})
	}
}

func TestURIForms(t *testing.T) {
	for _, tc := range []struct {
		id   identity.ID
		want string
	}{
		// A name stays one path segment, whatever it holds.
		{identity.ID{Role: identity.Assigner, Node: "a/task/kv/x"}, "spiffe://slicerd/assigner/a%2Ftask%2Fkv%2Fx"},
		{identity.ID{Role: identity.Admin, Name: "50% *"}, "spiffe://slicerd/admin/50%25%20*"},
		// Any is written as itself.
		{identity.ID{Role: identity.Task, Job: "kv", Task: identity.Any}, "spiffe://slicerd/task/kv/*"},
		{identity.ID{Role: identity.Client, Job: identity.Any}, "spiffe://slicerd/client/*"},
	} {
		if got := tc.id.String(); got != tc.want {
			t.Errorf("%+v written as %q, want %q", tc.id, got, tc.want)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct {
		uri, msg string
	}{
		{"https://slicerd/assigner/n1", "is not under spiffe://slicerd/"},
		{"spiffe://example.org/assigner/n1", "is not under spiffe://slicerd/"},
		{"spiffe://slicerd:8443/assigner/n1", "is not under spiffe://slicerd/"},
		{"spiffe://SLICERD/assigner/n1", "is not under spiffe://slicerd/"},
		{"spiffe:slicerd/assigner/n1", "is not under spiffe://slicerd/"},
		{"/assigner/n1", "is not under spiffe://slicerd/"},
		{"spiffe://evil@slicerd/admin/ops", "carries user information"},
		{"spiffe://slicerd/admin/ops?x=1", "has a query"},
		{"spiffe://slicerd/admin/ops?", "has a query"},
		{"spiffe://slicerd/admin/ops#x", "has a fragment"},
		{"spiffe://slicerd", "empty or badly escaped path segment"},
		{"spiffe://slicerd/", "empty or badly escaped path segment"},
		{"spiffe://slicerd/assigner", "role assigner takes 1 path segments, not 0"},
		{"spiffe://slicerd/assigner/", "empty or badly escaped path segment"},
		{"spiffe://slicerd/assigner/n1/", "empty or badly escaped path segment"},
		{"spiffe://slicerd/assigner//n1", "empty or badly escaped path segment"},
		{"spiffe://slicerd/assigner/n1/extra", "role assigner takes 1 path segments, not 2"},
		{"spiffe://slicerd/distributor/a/b", "role distributor takes 1 path segments, not 2"},
		{"spiffe://slicerd/backup", "role backup takes 1 path segments, not 0"},
		{"spiffe://slicerd/task/kv", "role task takes 2 path segments, not 1"},
		{"spiffe://slicerd/task/kv/kv-0/x", "role task takes 2 path segments, not 3"},
		{"spiffe://slicerd/client", "role client takes 1 path segments, not 0"},
		{"spiffe://slicerd/client/kv/x", "role client takes 1 path segments, not 2"},
		{"spiffe://slicerd/admin", "role admin takes 1 path segments, not 0"},
		{"spiffe://slicerd/admin/a/b", "role admin takes 1 path segments, not 2"},
		{"spiffe://slicerd/root/x", `names role "root"`},
		{"spiffe://slicerd/Assigner/n1", `names role "Assigner"`},
		{"spiffe://slicerd/assigner/%zz", "invalid URL escape"},
		{"spiffe://slicerd/task/KV/kv-0", "job name"},
		{"spiffe://slicerd/task/kv%2Fx/kv-0", "job name"},
		{"spiffe://slicerd/task/%2A/kv-0", "job name"},
		{"spiffe://slicerd/task/kv/-kv", "task name"},
		{"spiffe://slicerd/task/kv/kv%200", "task name"},
		{"spiffe://slicerd/task/kv/" + strings.Repeat("a", 129), "task name"},
		{"spiffe://slicerd/client/Kv", "job name"},
		{"spiffe://slicerd/client/kv%2A", "job name"},
		{"spiffe://slicerd/client/%2A%2A", "job name"},
		{"spiffe://sli cerd/admin/ops", "invalid slicerd identity"},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			id, err := identity.Parse(tc.uri)
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want an error", tc.uri, id)
			}
			if !errors.Is(err, identity.ErrInvalid) {
				t.Fatalf("Parse(%q): %v does not wrap ErrInvalid", tc.uri, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Parse(%q): %q does not say %q", tc.uri, err, tc.msg)
			}
		})
	}
}

func TestFromCertSkipsForeignURIs(t *testing.T) {
	cert := &x509.Certificate{URIs: []*url.URL{
		mustURL(t, "spiffe://example.org/ns/default/sa/web"),
		mustURL(t, "https://slicerd/assigner/n1"),
		identity.ID{Role: identity.Assigner, Node: "n1"}.URI(),
		mustURL(t, "urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66"),
		identity.ID{Role: identity.Backup, Node: "n1"}.URI(),
	}}
	ids, err := identity.FromCert(cert)
	if err != nil {
		t.Fatal(err)
	}
	want := []identity.ID{{Role: identity.Assigner, Node: "n1"}, {Role: identity.Backup, Node: "n1"}}
	if len(ids) != len(want) || ids[0] != want[0] || ids[1] != want[1] {
		t.Fatalf("FromCert = %+v, want %+v", ids, want)
	}

	none, err := identity.FromCert(&x509.Certificate{})
	if err != nil || len(none) != 0 {
		t.Fatalf("FromCert of a certificate without URIs = %v, %v; want none", none, err)
	}

	// A URI inside the trust domain but malformed is reported, not skipped:
	// it is a mistake in issuing the certificate.
	bad := &x509.Certificate{URIs: []*url.URL{
		identity.ID{Role: identity.Assigner, Node: "n1"}.URI(),
		mustURL(t, "spiffe://slicerd/task/kv"),
	}}
	if ids, err := identity.FromCert(bad); !errors.Is(err, identity.ErrInvalid) {
		t.Fatalf("FromCert with a malformed slicerd URI = %v, %v; want ErrInvalid", ids, err)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestPrincipal(t *testing.T) {
	agent := identity.Principal{IDs: []identity.ID{
		{Role: identity.Assigner, Node: "n1"},
		{Role: identity.Distributor, Node: "n1"},
	}}
	task := identity.Principal{IDs: []identity.ID{{Role: identity.Task, Job: "kv", Task: "kv-0"}}}
	anyTask := identity.Principal{IDs: []identity.ID{{Role: identity.Task, Job: "kv", Task: identity.Any}}}
	client := identity.Principal{IDs: []identity.ID{{Role: identity.Client, Job: "kv"}}}
	anyClient := identity.Principal{IDs: []identity.ID{{Role: identity.Client, Job: identity.Any}}}
	admin := identity.Principal{IDs: []identity.ID{{Role: identity.Admin, Name: "ops"}}}
	token := identity.Principal{Token: "ci"}
	var anon identity.Principal

	t.Run("Anonymous", func(t *testing.T) {
		if !anon.Anonymous() || anon.String() != "anonymous" {
			t.Fatalf("zero Principal: Anonymous %v, String %q", anon.Anonymous(), anon.String())
		}
		for _, p := range []identity.Principal{agent, task, client, admin, token} {
			if p.Anonymous() {
				t.Errorf("%v is anonymous", p)
			}
		}
	})

	t.Run("Admin", func(t *testing.T) {
		for _, tc := range []struct {
			p    identity.Principal
			want bool
		}{{admin, true}, {token, true}, {agent, false}, {task, false}, {anyClient, false}, {anon, false}} {
			if got := tc.p.Admin(); got != tc.want {
				t.Errorf("%v.Admin() = %v, want %v", tc.p, got, tc.want)
			}
		}
	})

	t.Run("Agent", func(t *testing.T) {
		for _, tc := range []struct {
			p        identity.Principal
			role     identity.Role
			wantNode string
			wantOK   bool
		}{
			{agent, "", "n1", true},
			{agent, identity.Assigner, "n1", true},
			{agent, identity.Distributor, "n1", true},
			{agent, identity.Backup, "", false},
			{task, "", "", false},
			{admin, "", "", false},
			{token, identity.Assigner, "", false},
			{anon, "", "", false},
		} {
			node, ok := tc.p.Agent(tc.role)
			if node != tc.wantNode || ok != tc.wantOK {
				t.Errorf("%v.Agent(%q) = %q, %v; want %q, %v", tc.p, tc.role, node, ok, tc.wantNode, tc.wantOK)
			}
		}
	})

	t.Run("AgentNode", func(t *testing.T) {
		for _, tc := range []struct {
			p    identity.Principal
			role identity.Role
			node string
			want bool
		}{
			{agent, identity.Assigner, "n1", true},
			{agent, "", "n1", true},
			{agent, identity.Assigner, "n2", false},
			{agent, identity.Backup, "n1", false},
			{task, "", "kv-0", false},
			{admin, "", "ops", false},
		} {
			if got := tc.p.AgentNode(tc.role, tc.node); got != tc.want {
				t.Errorf("%v.AgentNode(%q, %q) = %v, want %v", tc.p, tc.role, tc.node, got, tc.want)
			}
		}
	})

	t.Run("TaskOf", func(t *testing.T) {
		for _, tc := range []struct {
			p         identity.Principal
			job, task string
			want      bool
		}{
			{task, "kv", "kv-0", true},
			{task, "kv", "kv-1", false},
			{task, "other", "kv-0", false},
			{anyTask, "kv", "kv-7", true},
			{anyTask, "other", "kv-7", false},
			{client, "kv", "kv-0", false},
			{anyClient, "kv", "kv-0", false},
			{agent, "kv", "kv-0", false},
			{admin, "kv", "kv-0", false},
			{token, "kv", "kv-0", false},
		} {
			if got := tc.p.TaskOf(tc.job, tc.task); got != tc.want {
				t.Errorf("%v.TaskOf(%q, %q) = %v, want %v", tc.p, tc.job, tc.task, got, tc.want)
			}
		}
	})

	t.Run("MayWatch", func(t *testing.T) {
		for _, tc := range []struct {
			p    identity.Principal
			job  string
			want bool
		}{
			{client, "kv", true},
			{client, "other", false},
			{anyClient, "kv", true},
			{anyClient, "other", true},
			{task, "kv", true},
			{task, "other", false},
			{anyTask, "other", false},
			{agent, "other", true},
			{admin, "other", true},
			{token, "other", true},
			{anon, "kv", false},
		} {
			if got := tc.p.MayWatch(tc.job); got != tc.want {
				t.Errorf("%v.MayWatch(%q) = %v, want %v", tc.p, tc.job, got, tc.want)
			}
		}
	})

	t.Run("String", func(t *testing.T) {
		p := identity.Principal{IDs: admin.IDs, Token: "ci"}
		if got, want := p.String(), "spiffe://slicerd/admin/ops,token:ci"; got != want {
			t.Fatalf("String = %q, want %q", got, want)
		}
	})
}

// FuzzParse checks that whatever Parse accepts, it writes back as a URI
// that parses to the same identity, and that whatever it refuses wraps
// ErrInvalid.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"spiffe://slicerd/assigner/n1",
		"spiffe://slicerd/distributor/rack%2F1",
		"spiffe://slicerd/backup/50%25",
		"spiffe://slicerd/task/kv/kv-0",
		"spiffe://slicerd/task/kv/%2A",
		"spiffe://slicerd/client/*",
		"spiffe://slicerd/admin/alice@example.com",
		"spiffe://slicerd/admin/ops?x",
		"spiffe://evil@slicerd/admin/ops",
		"spiffe://slicerd/assigner/a%20b/c",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := identity.Parse(s)
		if err != nil {
			if !errors.Is(err, identity.ErrInvalid) {
				t.Fatalf("Parse(%q): %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		back, err := identity.Parse(id.String())
		if err != nil {
			t.Fatalf("Parse(%q) = %+v, whose URI %q does not parse: %v", s, id, id.String(), err)
		}
		if back != id {
			t.Fatalf("Parse(%q) = %+v, whose URI %q parses as %+v", s, id, id.String(), back)
		}
	})
}
