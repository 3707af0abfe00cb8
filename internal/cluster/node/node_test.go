package node

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
)

func TestNodeGuard(t *testing.T) {
	const secret = "s3cret-s3cret-s3cret"
	ca, err := clustertls.Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	load := func(id string) *clustertls.Material {
		role := clustertls.RoleAPI
		if id != "" {
			role = clustertls.RoleNode
		}
		m, err := clustertls.Load(tlsDir(t, ca, id), role, id)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	self, api, other := load("n7"), load(""), load("n8")
	// conn is the TLS state of a request: the client's certificate.
	conn := func(m *clustertls.Material) *tls.ConnectionState {
		return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{m.Leaf}}
	}
	n := New(Config{ID: "n7", Secret: secret, TLS: self})
	n.gen.Store(41)
	var sawSecret, sawTLS bool
	h := n.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawSecret = r.Header.Get(cluster.HeaderSecret) != ""
		sawTLS = r.TLS != nil
		w.WriteHeader(http.StatusCreated)
	}))
	peer := conn(api)
	do := func(method, target, host string, hdr map[string]string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, target, nil)
		r.TLS = peer
		if host != "" {
			r.Host = host
		}
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := do("GET", "/sandboxes", "", nil); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "cluster secret") {
		t.Errorf("no secret: %d %s", w.Code, w.Body)
	}
	if w := do("GET", "/sandboxes", "", map[string]string{cluster.HeaderSecret: "wrong-wrong-wrong-wrong"}); w.Code != http.StatusUnauthorized {
		t.Errorf("wrong secret: %d", w.Code)
	}
	if w := do("GET", "/sandboxes", "", map[string]string{cluster.HeaderSecret: secret}); w.Code != http.StatusCreated || sawSecret || sawTLS {
		t.Errorf("with the secret: %d, secret passed on: %v, the hop's TLS passed on as the client's: %v", w.Code, sawSecret, sawTLS)
	} else if w.Header().Get(cluster.HeaderNode) != "n7" {
		t.Errorf("%s = %q", cluster.HeaderNode, w.Header().Get(cluster.HeaderNode))
	}
	// The right secret, but no client certificate (plain HTTP, or TLS
	// without one), or another node's.
	for name, p := range map[string]*tls.ConnectionState{"plain HTTP": nil, "no certificate": {}, "node n8's certificate": conn(other)} {
		peer = p
		if w := do("GET", "/sandboxes", "", map[string]string{cluster.HeaderSecret: secret}); w.Code != http.StatusUnauthorized ||
			!strings.Contains(w.Body.String(), "client certificate") {
			t.Errorf("%s with the secret: %d %s; want 401", name, w.Code, w.Body)
		}
		if w := do("GET", "/health", "", nil); w.Code != http.StatusCreated {
			t.Errorf("%s: the node's /health must be public: %d", name, w.Code)
		}
	}
	peer = conn(api)
	if w := do("GET", "/health", "", nil); w.Code != http.StatusCreated {
		t.Errorf("the node's /health must be public: %d", w.Code)
	}
	if w := do("GET", "/health", "", map[string]string{"E2b-Sandbox-Id": "abc"}); w.Code != http.StatusUnauthorized {
		t.Errorf("a sandbox's /health (header) is not public: %d", w.Code)
	}
	if w := do("GET", "/health", "49983-abc.example.com", nil); w.Code != http.StatusUnauthorized {
		t.Errorf("a sandbox's /health (host) is not public: %d", w.Code)
	}
	w := do("POST", "/v2/sandboxes", "", map[string]string{cluster.HeaderSecret: secret})
	if got := w.Header().Get(cluster.HeaderGen); got != "42" {
		t.Errorf("create response %s = %q, want 42 (the next heartbeat's generation)", cluster.HeaderGen, got)
	}
	if got := do("GET", "/sandboxes", "", map[string]string{cluster.HeaderSecret: secret}).Header().Get(cluster.HeaderGen); got != "" {
		t.Errorf("a non-create response carries %s = %q", cluster.HeaderGen, got)
	}
}

// tlsDir writes a --cluster-tls-dir of ca: node id's, or the api tier's
// when id is "".
func tlsDir(t *testing.T, ca *clustertls.CA, id string) string {
	t.Helper()
	dir := t.TempDir()
	crtName, keyName := clustertls.APICrt, clustertls.APIKey
	crt, key, err := ca.IssueAPI()
	if id != "" {
		crtName, keyName = clustertls.NodeCrt, clustertls.NodeKey
		crt, key, err = ca.IssueNode(id, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{clustertls.CACert: ca.CertPEM(), crtName: crt, keyName: key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
