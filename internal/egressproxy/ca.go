package egressproxy

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// CA signs the leaf certificates the proxy shows sandboxes. One per node,
// made at start and held only in the daemon's memory (see doc.go for why
// per node, and how it rotates).
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// CAValidity is how long a node CA is valid; a daemon restart makes a new
// one well before.
const CAValidity = 90 * 24 * time.Hour

// NewCA makes a fresh CA (ECDSA P-256) named after node.
func NewCA(node string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Airlock egress CA " + node, Organization: []string{"Airlock"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		leaves: map[string]*tls.Certificate{}}, nil
}

// CertPEM is the CA certificate a sandbox with rules trusts.
func (c *CA) CertPEM() []byte { return c.certPEM }

// Cert is the CA certificate.
func (c *CA) Cert() *x509.Certificate { return c.cert }

// MaxLeaves bounds a CA's leaf cache (names: a node has few ruled
// domains); a full cache drops expiring leaves first, then any.
const MaxLeaves = 1024

// LeafValidity is a leaf's lifetime (never past the CA's); a cached leaf
// is replaced an hour before it ends.
const LeafValidity = 7 * 24 * time.Hour

// Leaf returns a certificate for host, ECDSA P-256, from the CA's cache
// (made once per name, not per connection). The cache belongs to this CA:
// a new CA (rotation) starts with none.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[host]; ok && time.Until(l.Leaf.NotAfter) > time.Hour {
		return l, nil
	}
	if len(c.leaves) >= MaxLeaves {
		for h, l := range c.leaves {
			if time.Until(l.Leaf.NotAfter) <= time.Hour {
				delete(c.leaves, h)
			}
		}
		for h := range c.leaves {
			if len(c.leaves) < MaxLeaves {
				break
			}
			delete(c.leaves, h)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf key: %w", err)
	}
	now := time.Now()
	notAfter := now.Add(LeafValidity)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: leaf}
	c.leaves[host] = l
	return l, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
