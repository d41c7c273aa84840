// Package webui serves slicerd's read-only web UI: a page of the jobs, and
// for each job a heatmap of its load over the key space and over time, its
// load per task, its assignment as coloured key ranges, its decision
// history and a box asking why a key is where it is.
//
// The page is static (HTML, CSS and plain JavaScript embedded in the
// binary; nothing is fetched from elsewhere) and reads the same Connect API
// the CLI uses, with Connect's JSON protocol, from the address that served
// it. Handler forwards only the read-only procedures in Procedures to the
// RPC handler it is given and refuses every other one, so nothing reached
// through the UI's address can change state. It has no authentication of
// its own: whoever reaches it reads what GetJob and GetJobHistory serve.
package webui

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
)

//go:embed static
var static embed.FS

// Procedures are the RPCs the page calls, all of which only read. Handler
// forwards these and no other.
var Procedures = []string{
	slicerv1connect.JobServiceListJobsProcedure,
	slicerv1connect.JobServiceGetJobProcedure,
	slicerv1connect.JobServiceGetJobHistoryProcedure,
	slicerv1connect.JobServiceExplainKeyProcedure,
	slicerv1connect.JobServiceGetLoadHistoryProcedure,
	slicerv1connect.DistributorServiceGetAssignmentProcedure,
	slicerv1connect.BackupServiceGetAssignmentProcedure,
}

// CallTimeout bounds one RPC made through the UI: GetAssignment waits for
// a job's first assignment, and a page must not hold a request forever.
const CallTimeout = 10 * time.Second

// Prefix is the path the page is served under.
const Prefix = "/ui/"

// assetExts are the extensions of files a browser may ask for under
// Prefix; a missing one is not found rather than taken for a job's name.
var assetExts = map[string]bool{".html": true, ".js": true, ".css": true, ".svg": true, ".png": true, ".ico": true, ".map": true, ".json": true, ".txt": true}

// securityHeaders are set on every response: the page loads nothing but
// its own files and is never framed.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"X-Frame-Options":        "DENY",
}

// Handler returns the web UI: the page under Prefix (and a redirect to it
// from /, and from Prefix+NAME to the page of job NAME), and the procedures in Procedures at their usual paths
// ("/slicer.v1.JobService/GetJob"), answered by rpc. Any other RPC is
// refused with PERMISSION_DENIED before rpc sees it; a procedure rpc does
// not serve (a node without a Distributor) answers as rpc does. log
// receives refusals at debug level.
func Handler(rpc http.Handler, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	errs := connect.NewErrorWriter()
	mux := http.NewServeMux()
	page := http.StripPrefix(Prefix, noCache(http.FileServerFS(files)))
	mux.Handle("GET "+Prefix, page)
	// A job's page is /ui/?job=NAME; /ui/NAME leads there, unless NAME is
	// one of the page's files or looks like one.
	mux.HandleFunc("GET "+Prefix+"{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if _, err := fs.Stat(files, name); err == nil || assetExts[path.Ext(name)] || assign.ValidateJobName(name) != nil {
			page.ServeHTTP(w, r)
			return
		}
		http.Redirect(w, r, Prefix+"?job="+url.QueryEscape(name), http.StatusFound)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix, http.StatusFound)
	})
	for _, p := range Procedures {
		mux.Handle("POST "+p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), CallTimeout)
			defer cancel()
			rpc.ServeHTTP(w, r.WithContext(ctx))
		}))
	}
	// Every other path that looks like an RPC ("/package.Service/Method")
	// is refused, whatever its method.
	refuse := func(w http.ResponseWriter, r *http.Request) {
		log.Debug("refused a procedure the web UI does not serve", "path", r.URL.Path, "remote", r.RemoteAddr)
		errs.Write(w, r, connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"the web UI's address serves only read-only procedures (%s); send %s to slicerd's RPC address (--rpc-addr)",
			shortNames(), r.URL.Path)))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		if isRPCPath(r.URL.Path) && !(r.Method == http.MethodPost && slices.Contains(Procedures, r.URL.Path)) {
			refuse(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// isRPCPath reports whether path has the shape of a Connect or gRPC
// procedure: "/pkg.Service/Method".
func isRPCPath(path string) bool {
	service, method, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return ok && strings.Contains(service, ".") && method != "" && !strings.Contains(method, "/")
}

func shortNames() string {
	names := make([]string, len(Procedures))
	for i, p := range Procedures {
		names[i] = strings.TrimPrefix(p[strings.Index(p, ".")+1:], "v1.")
	}
	return strings.Join(names, ", ")
}

// noCache makes browsers revalidate the page's files, so a new slicerd
// binary's page is picked up at once; they are small.
func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}
