package tlsconfig

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slicerd/slicerd/identity"
)

// A certificate's expiry is exported and warned about ahead of time, and
// an expired one is refused as expired, not as "not signed by the CA".
func TestExpiry(t *testing.T) {
	ca, err := NewCA("test CA", 365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := ca.IssueFiles(dir, "n1", caFile, Leaf{IDs: []identity.ID{{Role: identity.Assigner, Node: "n1"}}, Validity: 30 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	src, err := Load(f, slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	exp := src.Expiry()
	if d := time.Until(exp.Cert); d < 29*24*time.Hour || d > 31*24*time.Hour {
		t.Errorf("certificate expires in %v, want about 30 days", d)
	}
	if d := time.Until(exp.CA); d < 364*24*time.Hour {
		t.Errorf("CA expires in %v, want about a year", d)
	}
	if src.WarnExpiry(14*24*time.Hour) || buf.Len() != 0 {
		t.Errorf("warned about a certificate 30 days from expiry with a 14-day horizon: %s", buf.String())
	}
	if !src.WarnExpiry(31*24*time.Hour) || !strings.Contains(buf.String(), "TLS certificate expires soon") || !strings.Contains(buf.String(), f.Cert) {
		t.Errorf("no warning naming %s with a 31-day horizon: %s", f.Cert, buf.String())
	}

	// Past its end the certificate is refused, as expired.
	_, _, _, _, err = load(f, time.Now().Add(31*24*time.Hour))
	if err == nil || !strings.Contains(err.Error(), "expired on") || strings.Contains(err.Error(), "not signed") {
		t.Errorf("loading an expired certificate: %v; want it called expired", err)
	}
}
