// Package clustertls is the transport security of the api → node hop
// (issue 23, finding M1): a cluster CA, the certificates it issues, and the
// TLS configurations both sides use.
//
// Every hop from the api tier to a node (forwarded REST and sandbox traffic,
// list fan-outs, the internal move API, PTY WebSockets, metrics) is TLS 1.3
// with mutual authentication against one cluster CA:
//
//   - A node's certificate is for server authentication only and names the
//     node: the URI SAN airlock:node:<id> (NodeURI), plus DNS/IP SANs of its
//     advertise address for other clients' benefit.
//   - The api tier's certificate is for client authentication only and
//     names the tier: the URI SAN airlock:api (APIURI).
//   - A node accepts a client certificate only when it chains to the CA for
//     client authentication AND names airlock:api (VerifyAPIClient): a
//     node's certificate is refused, so that one node cannot call another as
//     if it were the api tier, even if its certificate was issued without
//     extended key usages.
//   - The api tier, dialing node X at the address the nodes table gives,
//     accepts the server only when its certificate chains to the CA for
//     server authentication AND names airlock:node:X (VerifyNode): a node
//     cannot answer for another, and a taken-over address is detected. The
//     host name is not checked: the identity is the node id, the address is
//     only where to find it.
//
// The CA and the certificates are plain PEM files (Init, CA.Issue*), made
// by `airlock cluster ca init` and `airlock cluster cert`, or by cert-manager
// (deploy/helm/airlock). A TLS directory (--cluster-tls-dir) holds ca.crt
// and node.crt/node.key (a node) or api.crt/api.key (the api tier): Load.
package clustertls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Identities, as URI SANs.
const (
	// APIURI names the api tier.
	APIURI = "airlock:api"
	// nodeURIPrefix + node id names a node.
	nodeURIPrefix = "airlock:node:"
)

// NodeURI is the URI SAN that names node id.
func NodeURI(id string) string { return nodeURIPrefix + id }

// Files of a TLS directory.
const (
	CACert  = "ca.crt"
	CAKey   = "ca.key" // only in the CA's directory: never on a node or api instance
	NodeCrt = "node.crt"
	NodeKey = "node.key"
	APICrt  = "api.crt"
	APIKey  = "api.key"
)

// Validity of what Init and the Issue methods make.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	CertValidity = 825 * 24 * time.Hour
)

// Material is what one side of the hop holds: the CA to verify the other
// side against, and its own certificate.
type Material struct {
	Roots *x509.CertPool
	Cert  tls.Certificate
	// Leaf is Cert's parsed leaf.
	Leaf *x509.Certificate

	// src, for a Material read by Load, re-reads the certificate and key
	// when their files change (a renewal, e.g. by cert-manager): handshakes
	// use the newest that still passes NewMaterial's checks.
	src *source
}

// reloadEvery is how often a loaded certificate's files are looked at.
const reloadEvery = 30 * time.Second

type source struct {
	dir, crt, key, role, nodeID string

	mu      sync.Mutex
	checked time.Time        // guarded by mu
	mod     time.Time        // newest mtime of crt and key at the last read; guarded by mu
	cur     *tls.Certificate // guarded by mu
}

// certificate is the certificate to present now.
func (m *Material) certificate() *tls.Certificate {
	if m.src == nil {
		return &m.Cert
	}
	s := m.src
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.checked) < reloadEvery {
		return s.cur
	}
	s.checked = time.Now()
	mod, err := newestMod(filepath.Join(s.dir, s.crt), filepath.Join(s.dir, s.key))
	if err != nil || !mod.After(s.mod) {
		return s.cur
	}
	crt, err1 := os.ReadFile(filepath.Join(s.dir, s.crt))
	key, err2 := os.ReadFile(filepath.Join(s.dir, s.key))
	ca, err3 := os.ReadFile(filepath.Join(s.dir, CACert))
	if err1 != nil || err2 != nil || err3 != nil {
		return s.cur
	}
	fresh, err := NewMaterial(ca, crt, key, s.role, s.nodeID)
	if err != nil || !fresh.Roots.Equal(m.Roots) {
		return s.cur // half-written, or a new CA: that needs a restart
	}
	s.cur, s.mod = &fresh.Cert, mod
	return s.cur
}

func newestMod(paths ...string) (time.Time, error) {
	var t time.Time
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return t, err
		}
		if st.ModTime().After(t) {
			t = st.ModTime()
		}
	}
	return t, nil
}

// Role of a TLS directory's owner.
const (
	RoleNode = "node"
	RoleAPI  = "api"
)

// Load reads a TLS directory: ca.crt and, for role node, node.crt and
// node.key (which must name nodeID) or, when the directory has no
// node.crt, <nodeID>.crt and <nodeID>.key (one directory holding several
// nodes' certificates, as a Kubernetes DaemonSet mounts one Secret); for
// role api, api.crt and api.key (which must name the api tier). The
// certificate must chain to ca.crt.
func Load(dir, role, nodeID string) (*Material, error) {
	crtName, keyName := APICrt, APIKey
	if role == RoleNode {
		crtName, keyName = NodeCrt, NodeKey
		if _, err := os.Stat(filepath.Join(dir, NodeCrt)); errors.Is(err, os.ErrNotExist) && nodeID != "" {
			crtName, keyName = nodeID+".crt", nodeID+".key"
		}
	}
	var data [3][]byte
	for i, name := range []string{CACert, crtName, keyName} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("reading this %s's TLS material: %w", role, err)
		}
		data[i] = b
	}
	mod, _ := newestMod(filepath.Join(dir, crtName), filepath.Join(dir, keyName))
	m, err := NewMaterial(data[0], data[1], data[2], role, nodeID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	m.src = &source{dir: dir, crt: crtName, key: keyName, role: role, nodeID: nodeID, checked: time.Now(), mod: mod, cur: &m.Cert}
	return m, nil
}

// NewMaterial is Load's check of PEM data: the CA certificate(s), and the
// certificate and key of a node (naming nodeID) or of the api tier.
func NewMaterial(caPEM, certPEM, keyPEM []byte, role, nodeID string) (*Material, error) {
	want, eku := APIURI, x509.ExtKeyUsageClientAuth
	if role == RoleNode {
		want, eku = NodeURI(nodeID), x509.ExtKeyUsageServerAuth
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no PEM certificate", CACert)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("this %s's certificate and key: %w", role, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parsing this %s's certificate: %w", role, err)
	}
	if _, err := verify(roots, leaf, intermediates(pair.Certificate[1:]), eku, time.Now()); err != nil {
		return nil, fmt.Errorf("this %s's certificate does not chain to %s: %w", role, CACert, err)
	}
	if !hasURI(leaf, want) {
		return nil, fmt.Errorf("this %s's certificate names %v, not %s: it is another's certificate", role, uris(leaf), want)
	}
	return &Material{Roots: roots, Cert: pair, Leaf: leaf}, nil
}

// ServerConfig is a node's listener configuration: its certificate, and a
// client certificate verified when given (the node's guard refuses every
// request but GET /health without one: APIClient). A given certificate
// that does not chain to the CA for client authentication, or that names
// anyone but the api tier, fails the handshake.
func (m *Material) ServerConfig() *tls.Config {
	base := &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.VerifyClientCertIfGiven,
		ClientCAs:  m.Roots,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return nil
			}
			return VerifyAPIClient(m.Roots, cs, time.Now())
		},
	}
	cfg := base.Clone()
	cfg.Certificates = []tls.Certificate{m.Cert}
	// Each handshake presents the newest certificate (a renewal is picked
	// up without a restart).
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.Certificates = []tls.Certificate{*m.certificate()}
		return c, nil
	}
	return cfg
}

// ClientConfig is the api tier's configuration to dial node nodeID: its
// client certificate, and the node's verified by VerifyNode.
func (m *Material) ClientConfig(nodeID string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return m.certificate(), nil
		},
		// The chain and the node identity are verified in VerifyConnection
		// (the address's host name is not what identifies a node).
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return VerifyNode(m.Roots, cs, nodeID, time.Now())
		},
		NextProtos: []string{"http/1.1"},
	}
}

// VerifyNode checks a server's certificate: it chains to roots for server
// authentication and names node nodeID.
func VerifyNode(roots *x509.CertPool, cs tls.ConnectionState, nodeID string, now time.Time) error {
	if nodeID == "" {
		return errors.New("no node id to verify the server against")
	}
	return verifyPeer(roots, cs, x509.ExtKeyUsageServerAuth, NodeURI(nodeID), now)
}

// VerifyAPIClient checks a client's certificate: it chains to roots for
// client authentication and names the api tier.
func VerifyAPIClient(roots *x509.CertPool, cs tls.ConnectionState, now time.Time) error {
	return verifyPeer(roots, cs, x509.ExtKeyUsageClientAuth, APIURI, now)
}

// APIClient reports whether a request's connection carries a verified api
// tier certificate (a node's guard).
func APIClient(roots *x509.CertPool, cs *tls.ConnectionState) bool {
	return cs != nil && len(cs.PeerCertificates) > 0 && VerifyAPIClient(roots, *cs, time.Now()) == nil
}

func verifyPeer(roots *x509.CertPool, cs tls.ConnectionState, eku x509.ExtKeyUsage, want string, now time.Time) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("no certificate presented")
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := verify(roots, leaf, inter, eku, now); err != nil {
		return fmt.Errorf("certificate %q: %w", leaf.Subject.CommonName, err)
	}
	if !hasURI(leaf, want) {
		return fmt.Errorf("certificate %q names %v, want %s", leaf.Subject.CommonName, uris(leaf), want)
	}
	return nil
}

func verify(roots *x509.CertPool, leaf *x509.Certificate, inter *x509.CertPool, eku x509.ExtKeyUsage, now time.Time) ([][]*x509.Certificate, error) {
	return leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{eku}})
}

func intermediates(ders [][]byte) *x509.CertPool {
	p := x509.NewCertPool()
	for _, d := range ders {
		if c, err := x509.ParseCertificate(d); err == nil {
			p.AddCert(c)
		}
	}
	return p
}

func hasURI(c *x509.Certificate, want string) bool {
	return slices.ContainsFunc(c.URIs, func(u *url.URL) bool { return u.String() == want })
}

func uris(c *x509.Certificate) []string {
	out := []string{}
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return out
}

type nodeKey struct{}

// WithNode marks ctx's requests as meant for node id: Transport verifies
// the server it reaches is that node.
func WithNode(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, nodeKey{}, id)
}

// NodeFrom is the node id WithNode set ("" when none).
func NodeFrom(ctx context.Context) string {
	id, _ := ctx.Value(nodeKey{}).(string)
	return id
}
