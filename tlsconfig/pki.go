package tlsconfig

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/slicerd/slicerd/identity"
)

// CA is a certificate authority that issues slicerd certificates: enough
// for a test cluster or a small deployment (slicerd tls init). Larger ones
// usually issue from their own PKI (Vault, cert-manager, step-ca) with the
// same identity URIs.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
}

// NewCA creates a self-signed CA valid for validity.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"slicerd"}},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// LoadCA reads a CA certificate and its key from PEM files.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("%w: read CA certificate: %w", ErrConfig, err)
	}
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrConfig, certFile)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrConfig, certFile, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: read CA key: %w", ErrConfig, err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("%w: %s holds no PEM key", ErrConfig, keyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrConfig, keyFile, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: %s: key cannot sign", ErrConfig, keyFile)
	}
	return &CA{Cert: cert, Key: signer, CertPEM: certPEM}, nil
}

// KeyPEM returns the CA's private key in PKCS #8 PEM.
func (ca *CA) KeyPEM() ([]byte, error) { return keyPEM(ca.Key) }

// Leaf describes a certificate to issue.
type Leaf struct {
	// CommonName is for people reading the certificate; slicerd ignores it.
	CommonName string
	IDs        []identity.ID
	// DNSNames and IPs let clients that check host names (curl, grpcurl,
	// browsers) accept a server certificate.
	DNSNames []string
	IPs      []net.IP
	Validity time.Duration
}

// Issue creates a key and a certificate for leaf, usable both as a server
// and as a client, and returns both in PEM.
func (ca *CA) Issue(leaf Leaf) (certPEM, keyPEMBytes []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	var uris []*url.URL
	for _, id := range leaf.IDs {
		uris = append(uris, id.URI())
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: leaf.CommonName, Organization: []string{"slicerd"}},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(leaf.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         uris,
		DNSNames:     leaf.DNSNames,
		IPAddresses:  leaf.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), kp, nil
}

// IssueFiles issues leaf and writes NAME.pem and NAME-key.pem (mode 0600)
// in dir, returning their Files with the CA file caFile.
func (ca *CA) IssueFiles(dir, name, caFile string, leaf Leaf) (Files, error) {
	c, k, err := ca.Issue(leaf)
	if err != nil {
		return Files{}, err
	}
	f := Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: caFile}
	if err := os.WriteFile(f.Cert, c, 0o644); err != nil {
		return Files{}, err
	}
	if err := os.WriteFile(f.Key, k, 0o600); err != nil {
		return Files{}, err
	}
	return f, nil
}

func keyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}
