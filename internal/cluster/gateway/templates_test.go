package gateway

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
)

// Nodes list only the templates on their disk: the gateway merges the
// lists (a template on several nodes once) and sends a request about one
// template to a node that holds it.
func TestTemplatesAcrossNodes(t *testing.T) {
	c := newTestCluster(t, 3)
	lists := map[string]string{
		"n1": `[{"templateID":"base","createdAt":"2026-01-01T00:00:00Z"},{"templateID":"app","createdAt":"2026-01-03T00:00:00Z"}]`,
		"n2": `[{"templateID":"base","createdAt":"2026-01-01T00:00:00Z"}]`,
		"n3": `[{"templateID":"base","createdAt":"2026-01-01T00:00:00Z"},{"templateID":"tool","createdAt":"2026-01-02T00:00:00Z"}]`,
	}
	for id, n := range c.nodes {
		list := lists[id]
		n.mu.Lock()
		n.handle = func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/templates" {
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(list))
				return
			}
			writeTestJSON(w, http.StatusOK, map[string]any{"node": id, "path": r.URL.Path})
		}
		n.mu.Unlock()
	}
	var got []struct{ TemplateID string }
	decode(t, c.do("GET", "/templates", true, nil), http.StatusOK, &got)
	var ids []string
	for _, g := range got {
		ids = append(ids, g.TemplateID)
	}
	if !slices.Equal(ids, []string{"base", "tool", "app"}) {
		t.Errorf("merged list %v, want base, tool, app once each (by creation time)", ids)
	}

	c.setNode("n3", func(n *cluster.Node) { n.Templates = []string{"base", "tool"} })
	for _, p := range []string{"/templates/tool", "/templates/tool/tags", "/templates/aliases/tool", "/airlock/v1/templates/tool"} {
		var e echo
		decode(t, c.do("GET", p, true, nil), http.StatusOK, &e)
		if e.Node != "n3" {
			t.Errorf("GET %s went to %s, want n3 (the node holding it)", p, e.Node)
		}
	}
	var e echo
	decode(t, c.do("DELETE", "/templates/tool", true, nil), http.StatusOK, &e)
	if e.Node != "n3" {
		t.Errorf("DELETE went to %s, want n3", e.Node)
	}
}

// A rebuild goes to the node holding the template (its layer cache).
func TestRebuildGoesWhereTheTemplateIs(t *testing.T) {
	c := newTestCluster(t, 3)
	c.setNode("n2", func(n *cluster.Node) { n.Templates = []string{"base", "app:v1"} }) // tags only
	for _, tc := range []struct{ path, body string }{
		{"/v3/templates", `{"name":"app:v2","cpuCount":2}`},
		{"/v3/templates", `{"alias":"app"}`},
		{"/airlock/v1/templates/app/build", "tar bytes"},
	} {
		var e echo
		decode(t, c.do("POST", tc.path, true, strings.NewReader(tc.body)), http.StatusOK, &e)
		if e.Node != "n2" {
			t.Errorf("POST %s %s went to %s, want n2", tc.path, tc.body, e.Node)
		}
	}
}

// A node that restarted numbers its heartbeats anew: its new heartbeats
// are not mistaken for old ones (found on a real cluster: templates built
// after a node restart were never placed).
func TestNodeRestartResetsPlacement(t *testing.T) {
	c := newTestCluster(t, 2)
	c.setNode("n1", func(n *cluster.Node) { n.Gen = 500 })
	c.setNode("n1", func(n *cluster.Node) {
		n.Gen = 1
		n.StartedAt = n.StartedAt.Add(time.Minute)
		n.Templates = []string{"base", "fresh"}
	})
	decode(t, c.do("POST", "/v2/sandboxes", true, strings.NewReader(`{"templateID":"fresh"}`)), http.StatusCreated, nil)
	if got := c.creates()["n1"]; got != 1 {
		t.Errorf("creates on n1: %d, want 1", got)
	}
}

// With an artifact store (PullTemplates) a template held by a drained node
// is created on another node, which pulls it; without, it is refused.
func TestPullTemplatesPlacesAnywhere(t *testing.T) {
	for _, pull := range []bool{false, true} {
		c := newTestCluster(t, 2, func(o *Options) { o.PullTemplates = pull })
		c.setNode("n2", func(n *cluster.Node) {
			n.Templates = []string{"base", "app"}
			n.State = cluster.StateDraining
		})
		resp := c.do("POST", "/v2/sandboxes", true, strings.NewReader(`{"templateID":"app"}`))
		want := map[bool]int{false: http.StatusServiceUnavailable, true: http.StatusCreated}[pull]
		decode(t, resp, want, nil)
		if pull && resp.Header.Get(cluster.HeaderNode) != "n1" {
			t.Errorf("create went to %q, want n1", resp.Header.Get(cluster.HeaderNode))
		}
	}
}
