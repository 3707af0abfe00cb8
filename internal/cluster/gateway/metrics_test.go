package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestMetricsMerged: GET /metrics through the api tier is every node's
// metrics, each sample labelled with its node; a node that fails is left
// out and named in X-Airlock-Partial.
func TestMetricsMerged(t *testing.T) {
	c := newTestCluster(t, 3)
	for _, id := range []string{"n1", "n2"} {
		n := c.nodes[id]
		n.mu.Lock()
		n.handle = func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = io.WriteString(w, "# HELP airlock_sandboxes Sandboxes by state.\n# TYPE airlock_sandboxes gauge\n"+
				`airlock_sandboxes{state="running"} `+map[string]string{"n1": "3", "n2": "5"}[id]+"\n"+
				"# HELP airlock_creates_total Creates.\n# TYPE airlock_creates_total counter\nairlock_creates_total 7\n")
		}
		n.mu.Unlock()
	}
	c.nodes["n3"].srv.Close()
	resp := c.do(http.MethodGet, "/metrics", true, nil)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if got := resp.Header.Get(HeaderPartial); got != "n3" {
		t.Errorf("%s = %q, want n3", HeaderPartial, got)
	}
	text := string(body)
	for _, want := range []string{
		`airlock_sandboxes{airlock_node="n1",state="running"} 3`,
		`airlock_sandboxes{airlock_node="n2",state="running"} 5`,
		`airlock_creates_total{airlock_node="n1"} 7`,
		`airlock_creates_total{airlock_node="n2"} 7`,
		"# TYPE airlock_sandboxes gauge",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("merged metrics lack %q:\n%s", want, text)
		}
	}
	if strings.Count(text, "# TYPE airlock_sandboxes gauge") != 1 {
		t.Errorf("a family repeated:\n%s", text)
	}
	// Without the key: refused, as on a node.
	resp = c.do(http.MethodGet, "/metrics", false, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a key: %d", resp.StatusCode)
	}
}
