package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
)

// A request routed by the route cache to a node that no longer holds the
// sandbox (it moved through another api instance, whose store notice has
// not arrived) goes to the node the store names now, body and all. A 404
// from the node that still holds it is passed on as it came.
func TestStaleCachedRouteFollowsTheMove(t *testing.T) {
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
	decode(t, c.do("GET", "/sandboxes/sb1", true, nil), http.StatusOK, nil) // cached now
	notHere := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		writeTestJSON(w, http.StatusNotFound, map[string]any{"code": 404, "message": `sandbox "sb1" doesn't exist or you don't have access to it`})
	}
	var gotBody string
	c.nodes["n1"].mu.Lock()
	c.nodes["n1"].handle = notHere
	c.nodes["n1"].mu.Unlock()
	c.nodes["n2"].mu.Lock()
	c.nodes["n2"].handle = func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		writeTestJSON(w, http.StatusOK, map[string]any{"node": "n2", "path": r.URL.Path})
	}
	c.nodes["n2"].mu.Unlock()
	// Moved to n2; no route notice (it is late).
	c.store.mu.Lock()
	c.store.sandboxes["sb1"] = "n2"
	c.store.mu.Unlock()
	var e echo
	decode(t, c.do("POST", "/sandboxes/sb1/connect", true, strings.NewReader(`{"timeout":60}`), "Content-Type", "application/json"), http.StatusOK, &e)
	if e.Node != "n2" || gotBody != `{"timeout":60}` {
		t.Fatalf("connect went to %q with body %q, want n2 with the client's body", e.Node, gotBody)
	}
	// The route was read again: the next request goes to n2 at once.
	decode(t, c.do("GET", "/sandboxes/sb1", true, nil), http.StatusOK, &e)
	if e.Node != "n2" {
		t.Fatalf("after the stale route: %q", e.Node)
	}
	// A sandbox that is really gone from the node the store names: the
	// node's own 404 comes back.
	c.store.mu.Lock()
	c.store.sandboxes["sb1"] = "n1"
	c.store.mu.Unlock()
	c.store.watch <- cluster.RouteChange{SandboxID: "sb1"}
	time.Sleep(50 * time.Millisecond)
	decode(t, c.do("GET", "/sandboxes/sb1", true, nil), http.StatusNotFound, nil) // caches n1
	if _, ok := c.g.routes.get("sb1"); !ok {
		t.Fatal("the route to n1 was not cached")
	}
	resp := c.do("GET", "/sandboxes/sb1", true, nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "doesn't exist") {
		t.Fatalf("a sandbox gone from its node: %d %s", resp.StatusCode, b)
	}
}
