package clustertls

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA makes a CA in a temporary directory.
func testCA(t *testing.T) (*CA, string) {
	t.Helper()
	dir := t.TempDir()
	ca, err := Init(dir)
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	return ca, dir
}

// tlsDir writes a TLS directory for role with the CA's ca.crt and the
// given certificate and key.
func tlsDir(t *testing.T, ca *CA, role string, crt, key []byte) string {
	t.Helper()
	dir := t.TempDir()
	names := map[string][2]string{RoleNode: {NodeCrt, NodeKey}, RoleAPI: {APICrt, APIKey}}[role]
	for name, data := range map[string][]byte{CACert: ca.CertPEM(), names[0]: crt, names[1]: key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func nodeMaterial(t *testing.T, ca *CA, id string) *Material {
	t.Helper()
	crt, key, err := ca.IssueNode(id, []string{"127.0.0.1", "node.example"})
	if err != nil {
		t.Fatalf("IssueNode: %v", err)
	}
	m, err := Load(tlsDir(t, ca, RoleNode, crt, key), RoleNode, id)
	if err != nil {
		t.Fatalf("Load node %s: %v", id, err)
	}
	return m
}

func apiMaterial(t *testing.T, ca *CA) *Material {
	t.Helper()
	crt, key, err := ca.IssueAPI()
	if err != nil {
		t.Fatalf("IssueAPI: %v", err)
	}
	m, err := Load(tlsDir(t, ca, RoleAPI, crt, key), RoleAPI, "")
	if err != nil {
		t.Fatalf("Load api: %v", err)
	}
	return m
}

func TestInitRefusesToReplaceACA(t *testing.T) {
	ca, dir := testCA(t)
	if _, err := Init(dir); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second Init = %v, want a refusal", err)
	}
	st, err := os.Stat(filepath.Join(dir, CAKey))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("ca.key mode = %v, %v; want 0600", st.Mode(), err)
	}
	again, err := LoadCA(dir)
	if err != nil || !again.Cert.Equal(ca.Cert) {
		t.Fatalf("LoadCA = %v; want the CA Init made", err)
	}
}

func TestIssuedCertificates(t *testing.T) {
	ca, _ := testCA(t)
	n := nodeMaterial(t, ca, "n1")
	if got := uris(n.Leaf); len(got) != 1 || got[0] != "airlock:node:n1" {
		t.Errorf("node URIs = %v", got)
	}
	if len(n.Leaf.IPAddresses) != 1 || len(n.Leaf.DNSNames) != 1 || n.Leaf.DNSNames[0] != "node.example" {
		t.Errorf("node SANs = %v %v", n.Leaf.IPAddresses, n.Leaf.DNSNames)
	}
	if len(n.Leaf.ExtKeyUsage) != 1 || n.Leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("node EKU = %v, want server auth only", n.Leaf.ExtKeyUsage)
	}
	a := apiMaterial(t, ca)
	if len(a.Leaf.ExtKeyUsage) != 1 || a.Leaf.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth || !hasURI(a.Leaf, APIURI) {
		t.Errorf("api cert: EKU %v URIs %v", a.Leaf.ExtKeyUsage, uris(a.Leaf))
	}
}

func TestLoadRefusesAnotherIdentity(t *testing.T) {
	ca, _ := testCA(t)
	crt, key, _ := ca.IssueNode("n2", nil)
	if _, err := Load(tlsDir(t, ca, RoleNode, crt, key), RoleNode, "n1"); err == nil || !strings.Contains(err.Error(), "airlock:node:n2") {
		t.Errorf("node n1 with n2's certificate: %v, want a refusal naming it", err)
	}
	// A node certificate in an api directory.
	if _, err := Load(tlsDir(t, ca, RoleAPI, crt, key), RoleAPI, ""); err == nil {
		t.Error("api tier with a node certificate: loaded")
	}
	// A certificate of another CA.
	other, _ := testCA(t)
	crt, key, _ = other.IssueNode("n1", nil)
	if _, err := Load(tlsDir(t, ca, RoleNode, crt, key), RoleNode, "n1"); err == nil || !strings.Contains(err.Error(), "does not chain") {
		t.Errorf("a certificate of another CA: %v, want a refusal", err)
	}
}

// node starts an HTTPS server with m's ServerConfig that answers whether
// the client is the api tier.
func node(t *testing.T, m *Material) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !APIClient(m.Roots, r.TLS) {
			http.Error(w, "not the api tier", http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	srv.TLS = m.ServerConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func baseTransport() *http.Transport { return &http.Transport{} }

func get(t *testing.T, rt http.RoundTripper, nodeID, rawURL string) (int, error) {
	t.Helper()
	ctx := context.Background()
	if nodeID != "" {
		ctx = WithNode(ctx, nodeID)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func TestTransportVerifiesTheNodeIdentity(t *testing.T) {
	ca, _ := testCA(t)
	n1 := node(t, nodeMaterial(t, ca, "n1"))
	tr := NewTransport(apiMaterial(t, ca), baseTransport)
	if code, err := get(t, tr, "n1", n1.URL); err != nil || code != 200 {
		t.Fatalf("api tier → n1: %d, %v; want 200", code, err)
	}
	// n1 answers at the address the api tier dials for n2 (an address
	// takeover, or a nodes row pointing elsewhere): refused.
	_, err := get(t, tr, "n2", n1.URL)
	if err == nil || !strings.Contains(err.Error(), "airlock:node:n1") || !strings.Contains(err.Error(), "want airlock:node:n2") {
		t.Fatalf("api tier → n2 at n1's address: %v; want a refusal naming both identities", err)
	}
	// No node named: refused before dialing.
	if _, err := get(t, tr, "", n1.URL); err == nil || !strings.Contains(err.Error(), "names no node") {
		t.Fatalf("request naming no node: %v", err)
	}
	if _, err := get(t, tr, "n1", strings.Replace(n1.URL, "https:", "http:", 1)); err == nil {
		t.Fatal("plain http request: sent")
	}
	// A server with a certificate of another CA, naming n1.
	other, _ := testCA(t)
	fake := node(t, nodeMaterial(t, other, "n1"))
	if _, err := get(t, tr, "n1", fake.URL); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("api tier → impostor n1 of another CA: %v; want unknown authority", err)
	}
}

func TestNodeRefusesClientsButTheAPITier(t *testing.T) {
	ca, _ := testCA(t)
	nm := nodeMaterial(t, ca, "n1")
	srv := node(t, nm)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)

	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: certs}}}
	}
	status := func(c *http.Client) (int, error) {
		resp, err := c.Get(srv.URL)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	// No certificate: the handshake passes, the request is refused.
	if code, err := status(client()); err != nil || code != http.StatusUnauthorized {
		t.Errorf("no client certificate: %d, %v; want 401", code, err)
	}
	// Another node's certificate (server auth only): the handshake fails.
	n2 := nodeMaterial(t, ca, "n2")
	if _, err := status(client(n2.Cert)); err == nil {
		t.Error("n2's certificate as a client: accepted")
	}
	// A node certificate without extended key usages (as an issuer that
	// sets none would make): chains for any use, but names no api tier.
	noEKU := issueRaw(t, ca, NodeURI("n3"), nil)
	if _, err := status(client(noEKU)); err == nil || !strings.Contains(err.Error(), "bad certificate") {
		t.Errorf("a node certificate without EKU as a client: %v; want a handshake failure", err)
	}
	// The api tier's certificate.
	if code, err := status(client(apiMaterial(t, ca).Cert)); err != nil || code != 200 {
		t.Errorf("api certificate: %d, %v; want 200", code, err)
	}
}

func TestVerifyCallbacks(t *testing.T) {
	ca, _ := testCA(t)
	now := time.Now()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	state := func(m *Material) tls.ConnectionState {
		return tls.ConnectionState{PeerCertificates: []*x509.Certificate{m.Leaf}}
	}
	n1, api := nodeMaterial(t, ca, "n1"), apiMaterial(t, ca)
	for _, c := range []struct {
		name string
		err  error
		ok   bool
	}{
		{"node n1 as n1", VerifyNode(roots, state(n1), "n1", now), true},
		{"node n1 as n2", VerifyNode(roots, state(n1), "n2", now), false},
		{"node n1 as no node", VerifyNode(roots, state(n1), "", now), false},
		{"api as a node", VerifyNode(roots, state(api), "n1", now), false},
		{"api as the api", VerifyAPIClient(roots, state(api), now), true},
		{"node as the api", VerifyAPIClient(roots, state(n1), now), false},
		{"nothing presented", VerifyAPIClient(roots, tls.ConnectionState{}, now), false},
		{"api, expired", VerifyAPIClient(roots, state(api), now.Add(CertValidity+time.Hour)), false},
	} {
		if (c.err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.name, c.err, c.ok)
		}
	}
	if APIClient(roots, nil) {
		t.Error("APIClient(no TLS) = true")
	}
}

// issueRaw issues a certificate naming uri with the given EKUs (nil: none).
func issueRaw(t *testing.T, ca *CA, uri string, eku []x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, _ := url.Parse(uri)
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: uri},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: eku, URIs: []*url.URL{u}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// A directory with several nodes' certificates named by node id (a
// DaemonSet's Secret): each node loads its own.
func TestLoadByNodeID(t *testing.T) {
	ca, _ := testCA(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CACert), ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"worker-1", "worker-2"} {
		crt, key, _ := ca.IssueNode(id, nil)
		_ = os.WriteFile(filepath.Join(dir, id+".crt"), crt, 0o600)
		_ = os.WriteFile(filepath.Join(dir, id+".key"), key, 0o600)
	}
	for _, id := range []string{"worker-1", "worker-2"} {
		m, err := Load(dir, RoleNode, id)
		if err != nil || !hasURI(m.Leaf, NodeURI(id)) {
			t.Fatalf("Load %s: %v", id, err)
		}
	}
	if _, err := Load(dir, RoleNode, "worker-3"); err == nil {
		t.Fatal("a node without a certificate in the directory loaded")
	}
}

// A renewed certificate (new files in the directory) is served without a
// restart; a broken one is not.
func TestReloadRenewedCertificate(t *testing.T) {
	ca, _ := testCA(t)
	crt, key, _ := ca.IssueNode("n1", []string{"127.0.0.1"})
	dir := tlsDir(t, ca, RoleNode, crt, key)
	m, err := Load(dir, RoleNode, "n1")
	if err != nil {
		t.Fatal(err)
	}
	srv := node(t, m)
	tr := NewTransport(apiMaterial(t, ca), baseTransport)
	served := func() string {
		t.Helper()
		tr.CloseIdleConnections()
		req, _ := http.NewRequestWithContext(WithNode(context.Background(), "n1"), http.MethodGet, srv.URL, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.String()
	}
	first := served()
	renew := func(crt, key []byte) {
		t.Helper()
		later := time.Now().Add(time.Minute)
		for name, data := range map[string][]byte{NodeCrt: crt, NodeKey: key} {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
			_ = os.Chtimes(p, later, later)
		}
		m.src.mu.Lock()
		m.src.checked = time.Time{}
		m.src.mu.Unlock()
	}
	// Another node's certificate is not taken.
	crt2, key2, _ := ca.IssueNode("n2", nil)
	renew(crt2, key2)
	if got := served(); got != first {
		t.Fatalf("n2's certificate was loaded for n1 (serial %s)", got)
	}
	crt3, key3, _ := ca.IssueNode("n1", nil)
	renew(crt3, key3)
	if got := served(); got == first {
		t.Fatal("the renewed certificate is not served")
	}
}
