package gateway

import (
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
)

// testCA is the cluster CA of every test cluster: fake nodes serve with its
// node certificates and the gateway dials them with its api certificate.
var testCA = sync.OnceValues(func() (*clustertls.CA, error) {
	dir, err := os.MkdirTemp("", "gateway-test-ca-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	return clustertls.Init(dir)
})

func mustCA(t *testing.T) *clustertls.CA {
	t.Helper()
	ca, err := testCA()
	if err != nil {
		t.Fatalf("test CA: %v", err)
	}
	return ca
}

// nodeTLS is node id's TLS material.
func nodeTLS(t *testing.T, id string) *clustertls.Material {
	t.Helper()
	ca := mustCA(t)
	crt, key, err := ca.IssueNode(id, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := clustertls.NewMaterial(ca.CertPEM(), crt, key, clustertls.RoleNode, id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// apiTLS is the gateway's TLS material.
func apiTLS(t *testing.T) *clustertls.Material {
	t.Helper()
	ca := mustCA(t)
	crt, key, err := ca.IssueAPI()
	if err != nil {
		t.Fatal(err)
	}
	m, err := clustertls.NewMaterial(ca.CertPEM(), crt, key, clustertls.RoleAPI, "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// M1 (issue 23): the gateway dials a node by the address its row gives and
// verifies that the server there is that node. A row pointing at another
// node (an address taken over, a forged registration) is refused: nothing
// reaches the impostor, the client gets a 502 that names both identities.
func TestGatewayRefusesANodeAnsweringForAnother(t *testing.T) {
	c := newTestCluster(t, 2)
	c.store.mu.Lock()
	c.store.sandboxes["sbx1"] = "n2"
	n2 := c.store.nodes["n2"]
	n2.Addr = c.nodes["n1"].addr()
	c.store.nodes["n2"] = n2
	c.store.mu.Unlock()
	c.refresh()

	resp := c.do("GET", "/sandboxes/sbx1", true, nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "airlock:node:n1") || !strings.Contains(string(b), "want airlock:node:n2") {
		t.Fatalf("GET a sandbox of n2 whose row points at n1: %d %s; want 502 naming both identities", resp.StatusCode, b)
	}
	c.nodes["n1"].mu.Lock()
	seen := len(c.nodes["n1"].seen)
	c.nodes["n1"].mu.Unlock()
	if seen != 0 {
		t.Fatalf("n1 received %d requests meant for n2", seen)
	}
	// The same request reaches n1 when it is n1's.
	c.store.mu.Lock()
	c.store.sandboxes["sbx1"] = "n1"
	c.store.mu.Unlock()
	c.g.routes.drop("sbx1")
	resp = c.do("GET", "/sandboxes/sbx1", true, nil)
	resp.Body.Close()
	if resp.StatusCode == http.StatusBadGateway {
		t.Fatalf("GET a sandbox of n1: %d", resp.StatusCode)
	}
}

func TestNewRefusesNoTLS(t *testing.T) {
	_, err := New(Options{Store: newFakeStore(), Secret: testSecret, APIKey: testKey})
	if err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("New without TLS material: %v", err)
	}
}
