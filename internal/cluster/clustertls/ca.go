package clustertls

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a cluster CA: its certificate and, to issue, its key.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// Init makes a new CA (ECDSA P-256) in dir: ca.crt (0644) and ca.key
// (0600). It refuses to overwrite an existing one.
func Init(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	for _, f := range []string{CACert, CAKey} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return nil, fmt.Errorf("%s already exists: not replacing a cluster CA (every certificate it issued would stop working)", filepath.Join(dir, f))
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Airlock cluster CA", Organization: []string{"Airlock"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("making the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, CAKey), keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, CACert), encodeCert(der), 0o644); err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads the CA (ca.crt and ca.key) of dir.
func LoadCA(dir string) (*CA, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CACert), filepath.Join(dir, CAKey))
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA in %s: %w", dir, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", filepath.Join(dir, CACert), err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, fmt.Errorf("%s is not a CA certificate with a signing key", filepath.Join(dir, CACert))
	}
	return &CA{Cert: cert, Key: signer}, nil
}

// CertPEM is ca.crt's content.
func (c *CA) CertPEM() []byte { return encodeCert(c.Cert.Raw) }

// IssueNode issues node id's server certificate; hosts are DNS names or IP
// addresses it is reached at (its advertise address's host). It returns the
// certificate and key, PEM.
func (c *CA) IssueNode(id string, hosts []string) (certPEM, keyPEM []byte, err error) {
	if id == "" {
		return nil, nil, errors.New("a node certificate needs the node id")
	}
	return c.issue("airlock node "+id, NodeURI(id), x509.ExtKeyUsageServerAuth, hosts)
}

// IssueAPI issues an api-tier client certificate.
func (c *CA) IssueAPI() (certPEM, keyPEM []byte, err error) {
	return c.issue("airlock api", APIURI, x509.ExtKeyUsageClientAuth, nil)
}

func (c *CA) issue(cn, uri string, eku x509.ExtKeyUsage, hosts []string) ([]byte, []byte, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, nil, fmt.Errorf("identity %q: %w", uri, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating a key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"Airlock"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(CertValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{eku},
		URIs:         []*url.URL{u},
	}
	for _, h := range hosts {
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, key.Public(), c.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("issuing %s: %w", uri, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return encodeCert(der), keyPEM, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encoding a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// WriteFile writes data to path with mode (a key 0600), replacing it.
func WriteFile(path string, data []byte, mode os.FileMode) error { return writeFile(path, data, mode) }

func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
