package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
)

// adoptingNode makes fake node n answer the internal adopt call as a real
// node does: the row moves to it (in the fake store) and the sandbox is
// reported paused or running there; other requests get the default answer.
func (c *testCluster) adoptingNode(n *fakeNode, adopted *[]cluster.AdoptRequest) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.handle = func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, cluster.InternalPrefix+"sandboxes/") {
			writeTestJSON(w, http.StatusOK, map[string]any{"node": n.id, "path": r.URL.Path})
			return
		}
		if r.Header.Get(cluster.HeaderInternal) == "" {
			c.t.Errorf("internal call without %s", cluster.HeaderInternal)
		}
		id := strings.Split(strings.TrimPrefix(r.URL.Path, cluster.InternalPrefix+"sandboxes/"), "/")[0]
		var req cluster.AdoptRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		n.mu.Lock()
		*adopted = append(*adopted, req)
		n.mu.Unlock()
		c.store.mu.Lock()
		c.store.sandboxes[id] = n.id
		delete(c.store.routes, id)
		c.store.mu.Unlock()
		state := "paused"
		if req.Resume {
			state = "running"
		}
		writeTestJSON(w, http.StatusOK, cluster.SandboxMoved{SandboxID: id, Node: n.id, State: state})
	}
}

// pausedOn records sandbox id as paused on node, its image in the store
// when movable.
func (c *testCluster) pausedOn(id, node string, movable bool) {
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	c.store.sandboxes[id] = node
	c.store.routes[id] = cluster.Route{NodeID: node, State: "paused", Movable: movable, TemplateID: "base", CPUCount: 2, MemoryMB: 512}
}

// TestMovePausedOffDrainingNode: a request for a paused sandbox with its
// image in the store, whose node is draining, makes another node adopt it
// and goes there; a running one stays on its draining node.
func TestMovePausedOffDrainingNode(t *testing.T) {
	c := newTestCluster(t, 2)
	var adopted []cluster.AdoptRequest
	c.adoptingNode(c.nodes["n2"], &adopted)
	c.pausedOn("sp", "n1", true)
	c.store.sandboxes["sr"] = "n1"
	c.setNode("n1", func(n *cluster.Node) { n.State = cluster.StateDraining })

	var got map[string]any
	decode(t, c.do(http.MethodPost, "/sandboxes/sp/connect", true, strings.NewReader(`{"timeout":60}`)), http.StatusOK, &got)
	if got["node"] != "n2" || got["path"] != "/sandboxes/sp/connect" {
		t.Fatalf("connect of a paused sandbox on a draining node went to %v", got)
	}
	if len(adopted) != 1 || adopted[0].From != "n1" || adopted[0].Resume {
		t.Fatalf("adopt calls %+v", adopted)
	}
	decode(t, c.do(http.MethodGet, "/sandboxes/sr", true, nil), http.StatusOK, &got)
	if got["node"] != "n1" {
		t.Fatalf("a running sandbox on a draining node went to %v", got["node"])
	}
}

// TestMovePausedOffLostNode: a lost node's paused, movable sandbox moves
// (instead of the "lost" answer); one without an image is still lost.
func TestMovePausedOffLostNode(t *testing.T) {
	c := newTestCluster(t, 2)
	var adopted []cluster.AdoptRequest
	c.adoptingNode(c.nodes["n2"], &adopted)
	c.pausedOn("sp", "n1", true)
	c.pausedOn("sl", "n1", false)
	c.setNode("n1", func(n *cluster.Node) { n.State = cluster.StateLost })

	var got map[string]any
	decode(t, c.do(http.MethodGet, "/sandboxes/sp", true, nil), http.StatusOK, &got)
	if got["node"] != "n2" {
		t.Fatalf("GET of a moved sandbox went to %v", got)
	}
	resp := c.do(http.MethodGet, "/sandboxes/sl", true, nil)
	var e map[string]any
	decode(t, resp, http.StatusNotFound, &e)
	if !strings.Contains(e["message"].(string), "was lost with node n1") {
		t.Fatalf("paused sandbox without an image on a lost node: %v", e)
	}
}

// TestMovePausedOffUnreachableNode: a node that does not answer (crashed,
// not yet marked lost): the paused, movable sandbox moves at once.
func TestMovePausedOffUnreachableNode(t *testing.T) {
	c := newTestCluster(t, 2)
	var adopted []cluster.AdoptRequest
	c.adoptingNode(c.nodes["n2"], &adopted)
	c.pausedOn("sp", "n1", true)
	c.nodes["n1"].srv.Close()

	var got map[string]any
	decode(t, c.do(http.MethodPost, "/sandboxes/sp/resume", true, strings.NewReader(`{}`)), http.StatusOK, &got)
	if got["node"] != "n2" {
		t.Fatalf("resume with its node down went to %v", got)
	}
}

// TestDrainMovesSandboxes: a drain evacuates the node and has each
// sandbox adopted elsewhere, the running ones resumed with what was left of
// their timeout; the node's failures are reported.
func TestDrainMovesSandboxes(t *testing.T) {
	c := newTestCluster(t, 2)
	var adopted []cluster.AdoptRequest
	c.adoptingNode(c.nodes["n2"], &adopted)
	for _, id := range []string{"a", "b"} {
		c.pausedOn(id, "n1", true)
	}
	n1 := c.nodes["n1"]
	n1.mu.Lock()
	n1.handle = func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/drop") { // told the sandbox moved away
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if r.URL.Path != cluster.InternalPrefix+"evacuate" || r.Header.Get(cluster.HeaderInternal) == "" {
			t.Errorf("unexpected call to n1: %s %s", r.Method, r.URL.Path)
		}
		writeTestJSON(w, http.StatusOK, cluster.EvacuateResponse{Sandboxes: []cluster.SandboxMoved{
			{SandboxID: "a", Node: "n1", State: "paused", Was: "running", LeftMs: 90_000},
			{SandboxID: "b", Node: "n1", State: "paused", Was: "paused"},
			{SandboxID: "c", Node: "n1", State: "paused", Was: "paused", Error: "paused without its memory"},
		}})
	}
	n1.mu.Unlock()

	var got cluster.DrainResponse
	decode(t, c.do(http.MethodPost, "/airlock/v1/nodes/n1/drain", true, nil), http.StatusOK, &got)
	if got.State != cluster.StateDraining || len(got.Moved) != 2 || len(got.Failed) != 1 || got.Failed[0].SandboxID != "c" {
		t.Fatalf("drain answer %+v", got)
	}
	for _, m := range got.Moved {
		want := map[string]string{"a": "running", "b": "paused"}[m.SandboxID]
		if m.Node != "n2" || m.State != want {
			t.Fatalf("moved %+v, want %s on n2", m, want)
		}
	}
	resumed, kept := 0, 0
	for _, a := range adopted { // moved concurrently: in any order
		switch {
		case a.Resume && a.TimeoutMs == 90_000:
			resumed++
		case !a.Resume:
			kept++
		}
	}
	if len(adopted) != 2 || resumed != 1 || kept != 1 {
		t.Fatalf("adopt calls %+v", adopted)
	}

	// ?move=false only stops placement.
	adopted = nil
	decode(t, c.do(http.MethodPost, "/airlock/v1/nodes/n2/drain?move=false", true, nil), http.StatusOK, &got)
	if got.State != cluster.StateDraining || len(got.Moved) != 0 || len(adopted) != 0 {
		t.Fatalf("drain without moving: %+v, adopt calls %+v", got, adopted)
	}
}

// TestInternalAPIIsNotForClients: the nodes' internal API cannot be
// reached through the api tier, by an API request or as sandbox traffic,
// and the internal mark a client sends is removed.
func TestInternalAPIIsNotForClients(t *testing.T) {
	c := newTestCluster(t, 1)
	c.store.sandboxes["s1"] = "n1"
	for _, path := range []string{cluster.InternalPrefix + "evacuate", "/AIRLOCK/v1/internal/evacuate", cluster.InternalPrefix + "sandboxes/s1/adopt"} {
		resp := c.do(http.MethodPost, path, true, strings.NewReader(`{"from":"n1"}`))
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("POST %s through the api tier: %d", path, resp.StatusCode)
		}
	}
	// Sandbox traffic is forwarded (its path is the sandbox's), without the mark.
	var got map[string]any
	decode(t, c.do(http.MethodPost, cluster.InternalPrefix+"evacuate", false, nil, "E2b-Sandbox-Id", "s1", "E2b-Sandbox-Port", "49983",
		cluster.HeaderInternal, "1"), http.StatusOK, &got)
	n := c.nodes["n1"]
	n.mu.Lock()
	last := n.seen[len(n.seen)-1]
	n.mu.Unlock()
	if last.Header.Get(cluster.HeaderInternal) != "" {
		t.Fatalf("the internal mark a client sent reached the node")
	}
}

// TestUnknownIDsCached: requests for a sandbox id the store does not know
// read the store once in unknownTTL, not once each.
func TestUnknownIDsCached(t *testing.T) {
	c := newTestCluster(t, 1)
	for range 5 {
		resp := c.do(http.MethodGet, "/sandboxes/inope", true, nil)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("unknown sandbox: %d", resp.StatusCode)
		}
		resp = c.do(http.MethodGet, "/", false, nil, "E2b-Sandbox-Id", "inope", "E2b-Sandbox-Port", "49983")
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("traffic to an unknown sandbox: %d", resp.StatusCode)
		}
	}
	c.store.mu.Lock()
	reads := c.store.sandboxReads
	c.store.mu.Unlock()
	if reads != 1 {
		t.Fatalf("%d store reads for one unknown id", reads)
	}
}

// TestListKeepsOwnersCopy: a sandbox listed by two nodes (it moved; the
// node it left has not dropped it yet) is listed once, as its owner lists
// it.
func TestListKeepsOwnersCopy(t *testing.T) {
	c := newTestCluster(t, 2)
	now := time.Now().UTC()
	c.nodes["n1"].sandboxes = []listed{{SandboxID: "smoved", StartedAt: now, State: "paused"}}
	c.nodes["n2"].sandboxes = []listed{{SandboxID: "smoved", StartedAt: now, State: "running"}}
	c.store.sandboxes["smoved"] = "n2"
	var got []map[string]any
	decode(t, c.do(http.MethodGet, "/v2/sandboxes", true, nil), http.StatusOK, &got)
	if len(got) != 1 || got[0]["clusterNode"] != "n2" || got[0]["state"] != "running" {
		t.Fatalf("merged list %v", got)
	}
}
