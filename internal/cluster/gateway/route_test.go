package gateway

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/placement"
	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/middleware"
)

func placementSeed(s uint64) placement.Config { return placement.Config{Seed: s} }

type echo struct {
	Node  string `json:"node"`
	Path  string `json:"path"`
	Host  string `json:"host"`
	Query string `json:"query"`
	Auth  string `json:"auth"` // cluster.HeaderAuthenticated as the node saw it
}

// Sandbox traffic is routed by header and by host without an API key, API
// requests about a sandbox by path, the rest to the lowest live node; the
// client's Host and node header are passed on, its secret header never.
func TestRouting(t *testing.T) {
	c := newTestCluster(t, 3)
	c.store.sandboxes["sb1"] = "n2"
	c.store.sandboxes["sb3"] = "n3"
	evil := []string{cluster.HeaderSecret, "client-sent-secret", cluster.HeaderAuthenticated, "forged"}
	cases := []struct {
		name, method, path string
		key                bool
		hdr                []string
		node               string
		host               string
	}{
		{name: "header", method: "GET", path: "/process.Process/List", hdr: []string{"E2b-Sandbox-Id", "sb1", "E2b-Sandbox-Port", "49983"}, node: "n2"},
		{name: "host", method: "POST", path: "/files", hdr: []string{"Host", "49983-sb3.example.com"}, node: "n3", host: "49983-sb3.example.com"},
		{name: "sandbox path", method: "GET", path: "/sandboxes/sb1", key: true, node: "n2"},
		{name: "client id suffix", method: "POST", path: "/sandboxes/sb1-6532622b/timeout", key: true, node: "n2"},
		{name: "v2 path", method: "GET", path: "/v2/sandboxes/sb3/logs", key: true, node: "n3"},
		{name: "api host is not sandbox traffic", method: "GET", path: "/sandboxes/sb3", key: true, hdr: []string{"Host", "api.example.com"}, node: "n3", host: "api.example.com"},
		{name: "pty", method: "GET", path: "/console/api/sandboxes/sb1/pty", key: true, node: "n2"},
		{name: "anything else", method: "GET", path: "/airlock/v1/anything", key: true, node: "n1"},
		{name: "console overview", method: "GET", path: "/console/api/overview", key: true, node: "n1"},
		// Egress secrets (issue 29): any live node; they share the store and
		// the --secrets-key-file key (test/cluster/16-secrets.test.mjs).
		{name: "secrets", method: "GET", path: "/secrets", key: true, node: "n1"},
		{name: "one secret", method: "POST", path: "/secrets/openai", key: true, node: "n1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := c.do(tc.method, tc.path, tc.key, nil, append(tc.hdr, evil...)...)
			if got := resp.Header.Get(cluster.HeaderNode); got != tc.node {
				t.Errorf("%s: %s = %q, want %q", tc.name, cluster.HeaderNode, got, tc.node)
			}
			var e echo
			decode(t, resp, http.StatusOK, &e)
			if e.Node != tc.node || e.Path != tc.path {
				t.Errorf("%s: reached %+v, want node %s path %s", tc.name, e, tc.node, tc.path)
			}
			// Only a request whose key the gateway checked is marked
			// authenticated; a client's own mark never passes.
			if want := map[bool]string{true: "api-key", false: ""}[tc.key]; e.Auth != want {
				t.Errorf("%s: the node saw %s %q, want %q", tc.name, cluster.HeaderAuthenticated, e.Auth, want)
			}
			if tc.host != "" && e.Host != tc.host {
				t.Errorf("%s: the node saw Host %q, want %q", tc.name, e.Host, tc.host)
			}
		})
	}
}

// Unknown sandboxes: 404 E2B body on the API, the proxy's 502 on traffic.
func TestUnknownSandbox(t *testing.T) {
	c := newTestCluster(t, 2)
	var e e2bError
	decode(t, c.do("GET", "/sandboxes/nope", true, nil), http.StatusNotFound, &e)
	if e.Code != 404 || e.Message != `sandbox "nope" not found` {
		t.Errorf("got %+v", e)
	}
	decode(t, c.do("GET", "/health", false, nil, "E2b-Sandbox-Id", "nope"), http.StatusBadGateway, &e)
	if e.Code != 502 {
		t.Errorf("traffic to an unknown sandbox: %+v", e)
	}
}

// The API key is required except for /health, sandbox traffic, OPTIONS
// and the shape of a signed template file upload.
func TestAPIKey(t *testing.T) {
	c := newTestCluster(t, 2)
	c.store.sandboxes["sb1"] = "n1"
	for _, p := range []struct{ method, path string }{
		{"GET", "/sandboxes/sb1"}, {"GET", "/v2/sandboxes"}, {"POST", "/sandboxes"}, {"GET", "/templates"},
		{"GET", "/airlock/v1/nodes"}, {"POST", "/airlock/v1/nodes/n1/drain"}, {"PUT", "/airlock/v1/template-files/abc"},
	} {
		var e e2bError
		decode(t, c.do(p.method, p.path, false, nil), http.StatusUnauthorized, &e)
		if e.Code != 401 || e.Message != middleware.UnauthorizedMessage {
			t.Errorf("%s %s: %+v", p.method, p.path, e)
		}
	}
	decode(t, c.do("GET", "/health", false, nil), http.StatusOK, nil)
	decode(t, c.do("GET", "/anything", false, nil, "E2b-Sandbox-Id", "sb1"), http.StatusOK, nil)
	// The web console's static files and a browser's GET / (redirected to
	// them by the node) need no key, as on a single host; its API does, and
	// so does a GET / that is not a browser's.
	for _, p := range []struct {
		method, path string
		hdr          []string
		status       int
	}{
		{"GET", "/console", nil, http.StatusOK},
		{"GET", "/console/", nil, http.StatusOK},
		{"HEAD", "/console/assets/index-abc.js", nil, http.StatusOK},
		{"GET", "/", []string{"Accept", "text/html,application/xhtml+xml"}, http.StatusOK},
		{"GET", "/", nil, http.StatusUnauthorized},
		{"POST", "/console/", nil, http.StatusUnauthorized},
		{"GET", "/console/api/overview", nil, http.StatusUnauthorized},
		{"GET", "/console/api", nil, http.StatusUnauthorized},
		{"GET", "/console/api/sandboxes/sb1/pty", nil, http.StatusUnauthorized},
		{"GET", "/console/../v2/sandboxes", nil, http.StatusUnauthorized},
	} {
		resp := c.do(p.method, p.path, false, nil, p.hdr...)
		resp.Body.Close()
		if resp.StatusCode != p.status {
			t.Errorf("%s %s without a key: %d, want %d", p.method, p.path, resp.StatusCode, p.status)
		}
	}
	var up echo
	decode(t, c.do("PUT", "/airlock/v1/template-files/abc?expires=9&signature=x", false, nil, cluster.HeaderAuthenticated, "forged"), http.StatusOK, &up)
	if up.Auth != "" {
		t.Errorf("a signed upload let through by its shape reached the node marked authenticated (%q): the node must check its signature", up.Auth)
	}
	resp := c.do("OPTIONS", "/sandboxes", false, nil, "Origin", "https://app")
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app" {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	// A forwarded answer carries the node's CORS headers only.
	resp = c.do("GET", "/console/api/overview", true, nil, "Origin", "https://app")
	resp.Body.Close()
	if got := resp.Header.Values("Access-Control-Allow-Origin"); len(got) != 0 {
		t.Errorf("forwarded answer: Access-Control-Allow-Origin %q added by the gateway", got)
	}
}

func TestHealth(t *testing.T) {
	c := newTestCluster(t, 3)
	c.setNode("n2", func(n *cluster.Node) { n.State = cluster.StateDraining })
	c.setNode("n3", func(n *cluster.Node) { n.Age = time.Minute })
	var h struct {
		Status, Role string
		Nodes        map[string]int
	}
	decode(t, c.do("GET", "/health", false, nil), http.StatusOK, &h)
	if h.Status != "ok" || h.Role != "api" || h.Nodes["live"] != 1 || h.Nodes["draining"] != 1 || h.Nodes["lost"] != 1 {
		t.Errorf("health: %+v", h)
	}
	c.store.mu.Lock()
	c.store.fail = errStoreDown
	c.store.mu.Unlock()
	decode(t, c.do("GET", "/health", false, nil), http.StatusServiceUnavailable, nil)
}

// A lost sandbox, or one on a node that stopped heartbeating, is a 404
// saying so.
func TestLostSandbox(t *testing.T) {
	c := newTestCluster(t, 2)
	at := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	c.store.lost["gone1"] = cluster.Lost{SandboxID: "gone1", NodeID: "n2", At: at, Reason: "node n2 was lost: no heartbeat for 15s"}
	var e e2bError
	decode(t, c.do("GET", "/sandboxes/gone1", true, nil), http.StatusNotFound, &e)
	if want := "sandbox gone1 was lost with node n2 at 2026-11-25T03:00:00Z: node n2 was lost: no heartbeat for 15s"; e.Message != want {
		t.Errorf("got %q, want %q", e.Message, want)
	}
	c.store.sandboxes["sb2"] = "n2"
	c.setNode("n2", func(n *cluster.Node) { n.Age = 20 * time.Second })
	decode(t, c.do("POST", "/sandboxes/sb2/pause", true, nil), http.StatusNotFound, &e)
	if !strings.Contains(e.Message, "sandbox sb2 was lost with node n2") || !strings.Contains(e.Message, "no heartbeat for 20s") {
		t.Errorf("owner lost: %q", e.Message)
	}
	decode(t, c.do("GET", "/", false, nil, "E2b-Sandbox-Id", "sb2"), http.StatusBadGateway, &e)
	if !strings.Contains(e.Message, "was lost with node n2") {
		t.Errorf("traffic to a lost sandbox: %q", e.Message)
	}
}

// A node that cannot be reached: 502 naming it.
func TestNodeDown(t *testing.T) {
	c := newTestCluster(t, 2)
	c.store.sandboxes["sb1"] = "n2"
	addr := c.nodes["n2"].addr()
	c.nodes["n2"].srv.Close()
	var e e2bError
	decode(t, c.do("GET", "/sandboxes/sb1", true, nil), http.StatusBadGateway, &e)
	if !strings.HasPrefix(e.Message, "node n2 ("+addr+") unreachable: ") || e.Code != 502 {
		t.Errorf("got %+v", e)
	}
	// Every node down: the last one tried is named.
	c.nodes["n1"].srv.Close()
	decode(t, c.do("GET", "/airlock/v1/anything", true, nil), http.StatusBadGateway, &e)
	if !strings.HasPrefix(e.Message, "node n2 (") {
		t.Errorf("all down: %+v", e)
	}
}

func TestAnyNodeFailsOver(t *testing.T) {
	c := newTestCluster(t, 3)
	c.nodes["n1"].srv.Close()
	var e echo
	decode(t, c.do("GET", "/airlock/v1/anything", true, nil), http.StatusOK, &e)
	if e.Node != "n2" {
		t.Errorf("reached %s, want n2 (n1 is down)", e.Node) // the lowest live node that answers
	}
}

// Template builds follow the build's node; upload links carry the template
// so that the upload reaches the same node.
func TestTemplateBuildRouting(t *testing.T) {
	c := newTestCluster(t, 3)
	c.store.builds["b1"] = "n3"
	c.store.templateBuilds["tpl"] = "n2"
	var e echo
	decode(t, c.do("GET", "/templates/tpl/builds/b1/status", true, nil), http.StatusOK, &e)
	if e.Node != "n3" {
		t.Errorf("build status on %s, want n3", e.Node)
	}
	decode(t, c.do("POST", "/v2/templates/tpl/builds/b1", true, strings.NewReader("{}")), http.StatusOK, &e)
	if e.Node != "n3" {
		t.Errorf("start build on %s, want n3", e.Node)
	}
	decode(t, c.do("GET", "/templates/tpl/builds/unknown/logs", true, nil), http.StatusOK, &e)
	if e.Node != "n2" {
		t.Errorf("unknown build: on %s, want the template's build node n2", e.Node)
	}

	c.nodes["n2"].handle = func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, http.StatusCreated, map[string]any{"present": false,
			"url": "http://" + r.Host + "/airlock/v1/template-files/abc?expires=99&signature=sig"})
	}
	var link struct {
		Present bool
		URL     string
	}
	decode(t, c.do("GET", "/templates/tpl/files/abc", true, nil), http.StatusCreated, &link)
	u, err := url.Parse(link.URL)
	if err != nil || u.Query().Get("template") != "tpl" || u.Query().Get("signature") != "sig" {
		t.Fatalf("upload link %q lacks template=tpl", link.URL)
	}
	c.nodes["n2"].handle = nil
	decode(t, c.do("PUT", u.RequestURI(), false, strings.NewReader("tar")), http.StatusOK, &e)
	if e.Node != "n2" {
		t.Errorf("upload on %s, want n2", e.Node)
	}

	// New builds go to the least loaded live node.
	c.setNode("n1", func(n *cluster.Node) { n.ReservedCPUs = 6 })
	c.setNode("n3", func(n *cluster.Node) { n.ReservedCPUs = 6 })
	for _, p := range []string{"/v3/templates", "/airlock/v1/templates/x/build"} {
		decode(t, c.do("POST", p, true, strings.NewReader("{}")), http.StatusOK, &e)
		if e.Node != "n2" {
			t.Errorf("new build %s on %s, want the least loaded n2", p, e.Node)
		}
	}
}

// A header-less signed /files URL goes to the node of the sandbox whose
// token verifies it.
func TestSignedFiles(t *testing.T) {
	c := newTestCluster(t, 3, func(o *Options) { o.VerifySignature = guest.VerifySignature })
	c.store.sandboxes["sb1"], c.store.sandboxes["sb2"] = "n1", "n3"
	c.store.tokens = []cluster.SandboxToken{{SandboxID: "sb1", NodeID: "n1", AccessToken: "t1"}, {SandboxID: "sb2", NodeID: "n3", AccessToken: "t2"}}
	sig := guest.Sign("/x", guest.OpRead, "", "t2", 0)
	var e echo
	decode(t, c.do("GET", "/files?path=/x&signature="+url.QueryEscape(sig), false, nil), http.StatusOK, &e)
	if e.Node != "n3" {
		t.Errorf("signed read on %s, want n3", e.Node)
	}
	decode(t, c.do("POST", "/files?path=/x&signature="+url.QueryEscape(sig), false, nil), http.StatusUnauthorized, nil)
}

// The route cache serves repeated lookups and drops what the store
// notifies.
func TestRouteCache(t *testing.T) {
	c := newTestCluster(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.g.runRouteWatch(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for c.g.routes.now() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	c.store.mu.Lock()
	c.store.sandboxes["sb1"] = "n1"
	c.store.mu.Unlock()
	for range 3 {
		decode(t, c.do("GET", "/sandboxes/sb1", true, nil), http.StatusOK, nil)
	}
	c.store.mu.Lock()
	reads := c.store.sandboxReads
	c.store.mu.Unlock()
	if reads != 1 {
		t.Errorf("%d store reads for 3 requests, want 1", reads)
	}
	c.store.mu.Lock()
	c.store.sandboxes["sb1"] = "n2"
	c.store.mu.Unlock()
	c.store.watch <- cluster.RouteChange{SandboxID: "sb1"}
	for {
		var e echo
		decode(t, c.do("GET", "/sandboxes/sb1", true, nil), http.StatusOK, &e)
		if e.Node == "n2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the route change was not applied")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Run reads the nodes table (a node that registers is used), reaps, and
// ends with its context.
func TestRun(t *testing.T) {
	c := newTestCluster(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.g.Run(ctx) }()
	extra := newFakeNode(t, "n9")
	c.store.mu.Lock()
	c.store.nodes["n9"] = cluster.Node{ID: "n9", Addr: extra.addr(), State: cluster.StateLive, Gen: 1, CPUs: 8, MemoryMB: 8192}
	delete(c.store.nodes, "n1")
	c.store.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := c.g.node("n9"); ok {
			if _, ok := c.g.node("n1"); !ok {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the registry did not follow the nodes table")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := c.g.placer.NodeStatus("n1"); ok {
		t.Error("n1 left the table but not the placer")
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Run: %v", err)
	}
}
