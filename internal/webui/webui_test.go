package webui

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder stands in for slicerd's RPC handler and records what reaches it.
type recorder struct {
	mu    sync.Mutex
	paths []string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.paths = append(r.paths, req.URL.Path)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{}`)
}

func (r *recorder) reached() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.paths)
}

func serve(t *testing.T) (*httptest.Server, *recorder) {
	rec := &recorder{}
	srv := httptest.NewServer(Handler(rec, nil))
	t.Cleanup(srv.Close)
	return srv, rec
}

func do(t *testing.T, method, url, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// The page's files are served from the binary with the content types a
// browser needs (a script served as text/plain does not run under nosniff).
func TestStaticAssets(t *testing.T) {
	srv, _ := serve(t)
	defer http.DefaultClient.CloseIdleConnections()
	for path, want := range map[string]string{
		"/ui/":            "text/html; charset=utf-8",
		"/ui/index.html":  "", // FileServer redirects it to /ui/
		"/ui/app.js":      "text/javascript; charset=utf-8",
		"/ui/style.css":   "text/css; charset=utf-8",
		"/ui/favicon.svg": "image/svg+xml",
	} {
		resp, body := do(t, "GET", srv.URL+path, "")
		if want == "" {
			if resp.Request.URL.Path != "/ui/" {
				t.Errorf("GET %s ended at %s, want /ui/", path, resp.Request.URL.Path)
			}
			continue
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != want || body == "" {
			t.Errorf("GET %s: %d %q (%d bytes); want 200 %q", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body), want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q; want nothing but the page's own files, never framed", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no X-Content-Type-Options: nosniff", path)
		}
	}
	resp, _ := do(t, "GET", srv.URL+"/", "")
	if resp.Request.URL.Path != "/ui/" {
		t.Errorf("GET / ended at %s, want a redirect to /ui/", resp.Request.URL.Path)
	}
	if resp, _ := do(t, "GET", srv.URL+"/ui/nope.js", ""); resp.StatusCode != 404 {
		t.Errorf("GET /ui/nope.js: %d, want 404", resp.StatusCode)
	}
	if resp, _ := do(t, "POST", srv.URL+"/ui/", "{}"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/: %d, want 405", resp.StatusCode)
	}
	// Nothing from another origin: every script and stylesheet is local.
	_, page := do(t, "GET", srv.URL+"/ui/", "")
	if m := regexp.MustCompile(`(?i)(src|href)="(https?:)?//`).FindString(page); m != "" {
		t.Errorf("the page loads something from another origin: %s", m)
	}
}

// /ui/NAME leads to the page of job NAME, whether or not the job exists
// (the page says when it does not); the page's own files, and names that
// look like files, are not taken for jobs.
func TestJobPath(t *testing.T) {
	srv, _ := serve(t)
	defer http.DefaultClient.CloseIdleConnections()
	for _, c := range []struct{ path, wantPath, wantQuery string }{
		{"/ui/kv", "/ui/", "job=kv"},
		{"/ui/orders.v2", "/ui/", "job=orders.v2"},
		{"/ui/no-such-job", "/ui/", "job=no-such-job"},
		{"/ui/app.js", "/ui/app.js", ""},
	} {
		resp, _ := do(t, "GET", srv.URL+c.path, "")
		if resp.StatusCode != 200 || resp.Request.URL.Path != c.wantPath || resp.Request.URL.RawQuery != c.wantQuery {
			t.Errorf("GET %s: %d at %s?%s; want 200 at %s?%s", c.path, resp.StatusCode,
				resp.Request.URL.Path, resp.Request.URL.RawQuery, c.wantPath, c.wantQuery)
		}
	}
	for _, p := range []string{"/ui/nope.js", "/ui/Not%20A%20Job", "/ui/kv/more"} {
		if resp, _ := do(t, "GET", srv.URL+p, ""); resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
		}
	}
}

// Only the read-only procedures reach the RPC handler; every other
// procedure, and every procedure called other than by POST, is refused
// with PERMISSION_DENIED in Connect's JSON error format.
func TestOnlyReadOnlyProcedures(t *testing.T) {
	srv, rec := serve(t)
	defer http.DefaultClient.CloseIdleConnections()
	for _, p := range Procedures {
		if resp, _ := do(t, "POST", srv.URL+p, `{"job":"kv"}`); resp.StatusCode != 200 {
			t.Errorf("POST %s: %d, want it forwarded", p, resp.StatusCode)
		}
	}
	if got := rec.reached(); !slices.Equal(got, Procedures) {
		t.Fatalf("the RPC handler saw %v, want %v", got, Procedures)
	}
	refused := []struct{ method, path string }{
		{"POST", slicerv1connect.JobServiceSetJobConfigProcedure},
		{"POST", slicerv1connect.JobServiceDeleteJobProcedure},
		{"POST", slicerv1connect.KeyringServiceInstallKeyProcedure},
		{"POST", slicerv1connect.LoadServiceReportLoadProcedure},
		{"POST", slicerv1connect.AssignerServiceWatchAssignmentProcedure},
		{"POST", slicerv1connect.DistributorServiceWatchAssignmentProcedure},
		{"POST", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"},
		{"GET", slicerv1connect.JobServiceGetJobProcedure + "?encoding=json&message=%7B%7D"},
		{"PUT", slicerv1connect.JobServiceGetJobProcedure},
	}
	for _, r := range refused {
		resp, body := do(t, r.method, srv.URL+r.path, `{"job":"kv","config":{"minRedundancy":2}}`)
		var e struct{ Code, Message string }
		if err := json.Unmarshal([]byte(body), &e); err != nil || resp.StatusCode != http.StatusForbidden || e.Code != "permission_denied" ||
			!strings.Contains(e.Message, "only read-only procedures") {
			t.Errorf("%s %s: %d %s; want 403 permission_denied saying only read-only procedures are served", r.method, r.path, resp.StatusCode, body)
		}
	}
	if got := rec.reached(); len(got) != len(Procedures) {
		t.Errorf("a refused call reached the RPC handler: %v", got[len(Procedures):])
	}
}

// The page calls no procedure Handler would refuse.
func TestPageCallsOnlyReadOnlyProcedures(t *testing.T) {
	js, err := static.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	calls := regexp.MustCompile(`"((?:JobService|DistributorService|BackupService|LoadService|AssignerService|KeyringService|LeaseService)/\w+)"`).FindAllStringSubmatch(string(js), -1)
	if len(calls) < 5 {
		t.Fatalf("found %d procedure names in app.js; the pattern no longer matches how it names them", len(calls))
	}
	for _, c := range calls {
		if !slices.Contains(Procedures, "/slicer.v1."+c[1]) {
			t.Errorf("app.js calls %s, which Handler refuses", c[1])
		}
	}
}
