package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority for tests: an ECDSA P-256 key and a
// self-signed certificate, written as PEM to CertFile.
type CA struct {
	Name     string
	CertFile string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
}

// certLifetime is long enough for any test and its reruns.
const certLifetime = 24 * time.Hour

// NewCA creates a CA named name, its certificate in the test's temporary
// directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("etcdtest: create CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Name: name, CertFile: filepath.Join(t.TempDir(), name+"-ca.pem"), cert: cert, key: key}
	writeAtomic(t, ca.CertFile, pemBlock("CERTIFICATE", der))
	return ca
}

// Issue creates a certificate and key signed by ca, with common name cn,
// valid for server and client authentication on localhost and 127.0.0.1,
// in new files of the test's temporary directory.
func (ca *CA) Issue(t testing.TB, cn string) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, cn+".pem"), filepath.Join(dir, cn+"-key.pem")
	ca.IssueTo(t, cn, certFile, keyFile)
	return certFile, keyFile
}

// IssueTo is Issue into the given files, replacing each with one rename,
// as a certificate rotation does.
func (ca *CA) IssueTo(t testing.TB, cn, certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("etcdtest: issue %s from %s: %v", cn, ca.Name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, keyFile, pemBlock("EC PRIVATE KEY", keyDER))
	writeAtomic(t, certFile, pemBlock("CERTIFICATE", der))
}

// Bundle writes the certificates of cas into one new PEM file, as a CA
// bundle that trusts each of them.
func Bundle(t testing.TB, cas ...*CA) string {
	t.Helper()
	var b []byte
	for _, ca := range cas {
		b = append(b, pemBlock("CERTIFICATE", ca.cert.Raw)...)
	}
	path := filepath.Join(t.TempDir(), "bundle.pem")
	writeAtomic(t, path, b)
	return path
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// serial is a random 128-bit serial number, unique in practice.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// writeAtomic replaces path with data in one rename, so a reader never
// sees half a file.
func writeAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
