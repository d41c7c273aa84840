package kvcache

import (
	"net/http"

	"github.com/slicerd/slicerd/identity"
)

// RequireJobPeer wraps a task's handler for a server on TLS: it serves a
// request only if the caller's certificate, already verified against the
// CA by the TLS handshake, names a client of job (or of every job) or a
// task of job (state handoff between the job's tasks), and answers 403
// otherwise. Without a TLS connection it answers 403 too: a server on TLS
// has no plain-text callers.
func RequireJobPeer(job string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "a client or task certificate of job "+job+" is required", http.StatusForbidden)
			return
		}
		ids, err := identity.FromCert(r.TLS.PeerCertificates[0])
		if err != nil || !jobPeer(ids, job) {
			http.Error(w, "the certificate names no client or task of job "+job, http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// jobPeer reports whether ids hold a client of job (or of every job) or a
// task of job.
func jobPeer(ids []identity.ID, job string) bool {
	for _, id := range ids {
		switch id.Role {
		case identity.Client:
			if id.Job == job || id.Job == identity.Any {
				return true
			}
		case identity.Task:
			if id.Job == job {
				return true
			}
		}
	}
	return false
}
