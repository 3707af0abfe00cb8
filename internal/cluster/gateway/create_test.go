package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/placement"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func (c *testCluster) creates() map[string]int {
	out := map[string]int{}
	for id, n := range c.nodes {
		n.mu.Lock()
		out[id] = n.creates
		n.mu.Unlock()
	}
	return out
}

// Creates spread over the nodes (in-flight and confirmed reservations) until
// the cluster is full: then 503 with placement's refusal, which says so and
// names the largest free slot.
func TestCreatesSpreadThenFull(t *testing.T) {
	c := newTestCluster(t, 3)
	for i := range 12 { // 3 nodes × 8 CPUs, 2 CPUs each
		path := "/sandboxes"
		if i%2 == 1 {
			path = "/v2/sandboxes"
		}
		decode(t, c.do("POST", path, true, strings.NewReader(`{"templateID":"base"}`), cluster.HeaderSecret, "client-sent-secret"), http.StatusCreated, nil)
	}
	for id, n := range c.creates() {
		if n != 4 {
			t.Errorf("node %s got %d creates, want 4 (%v)", id, n, c.creates())
		}
	}
	var e e2bError
	decode(t, c.do("POST", "/sandboxes", true, strings.NewReader(`{}`)), http.StatusServiceUnavailable, &e)
	if !strings.HasPrefix(e.Message, "the cluster is full: no node can take the sandbox (2 CPUs, 512 MiB memory, template base (required)): of 3 live nodes, CPU is short on 3") ||
		!strings.HasSuffix(e.Message, "; the largest free slot on any node is 0 CPUs and 6144 MiB memory (on n1)") {
		t.Errorf("full cluster: %q", e.Message)
	}
}

// The template's resources come from Options.Template; a template is
// placed only where it is held; a snapshot starts on its node.
func TestCreateTemplateAndSnapshot(t *testing.T) {
	c := newTestCluster(t, 3, func(o *Options) {
		o.Template = func(ctx context.Context, name string) (int, int, error) {
			if name == "big" {
				return 4, 1024, nil
			}
			return 0, 0, fmt.Errorf("no template %s", name)
		}
	})
	c.setNode("n2", func(n *cluster.Node) { n.Templates = []string{"base", "big"} })
	decode(t, c.do("POST", "/v2/sandboxes", true, strings.NewReader(`{"templateID":"big"}`)), http.StatusCreated, nil)
	decode(t, c.do("POST", "/v2/sandboxes", true, strings.NewReader(`{"templateID":"big"}`)), http.StatusCreated, nil)
	if got := c.creates(); got["n2"] != 2 {
		t.Fatalf("creates of big: %v, want both on n2", got)
	}
	var e e2bError
	decode(t, c.do("POST", "/v2/sandboxes", true, strings.NewReader(`{"templateID":"big"}`)), http.StatusServiceUnavailable, &e)
	if !strings.Contains(e.Message, "4 CPUs, 1024 MiB memory") || !strings.Contains(e.Message, "2 do not hold the template big") {
		t.Errorf("refusal: %q", e.Message)
	}
	// A template no node holds is not found, as on a single host.
	decode(t, c.do("POST", "/v2/sandboxes", true, strings.NewReader(`{"templateID":"other"}`)), http.StatusNotFound, &e)
	if e.Message != "template 'other' not found" {
		t.Errorf("unknown template: %q", e.Message)
	}

	// A template whose build just ended on n1, before n1's heartbeat lists
	// it: the create goes to the build node (name:tag by its name).
	c.store.mu.Lock()
	c.store.templateBuilds["fresh"] = "n1"
	c.store.mu.Unlock()
	before := c.creates()["n1"]
	decode(t, c.do("POST", "/v2/sandboxes", true, strings.NewReader(`{"templateID":"fresh:v2"}`)), http.StatusCreated, nil)
	if got := c.creates()["n1"]; got != before+1 {
		t.Errorf("create of a just-built template: n1 got %d creates, want %d", got, before+1)
	}

	c.store.snapshots["snap"] = "n3"
	var created struct{ SandboxID, Body string }
	decode(t, c.do("POST", "/sandboxes", true, strings.NewReader(`{"templateID":"snap","timeout":30}`)), http.StatusCreated, &created)
	if !strings.HasPrefix(created.SandboxID, "n3") || created.Body != `{"templateID":"snap","timeout":30}` {
		t.Errorf("snapshot create: %+v", created)
	}
	c.setNode("n3", func(n *cluster.Node) { n.State = cluster.StateDraining })
	decode(t, c.do("POST", "/sandboxes", true, strings.NewReader(`{"templateID":"snap"}`)), http.StatusServiceUnavailable, &e)
	if e.Message != "snapshot snap is on node n3, which is draining" {
		t.Errorf("snapshot on a draining node: %q", e.Message)
	}
}

func TestCreateBodyCap(t *testing.T) {
	c := newTestCluster(t, 1)
	body := `{"templateID":"base","metadata":{"x":"` + strings.Repeat("a", 1<<20) + `"}}`
	decode(t, c.do("POST", "/sandboxes", true, strings.NewReader(body)), http.StatusRequestEntityTooLarge, nil)
}

// A create whose node cannot be reached is placed once more elsewhere.
func TestCreateRetriesElsewhere(t *testing.T) {
	c := newTestCluster(t, 2)
	c.nodes["n1"].srv.Close()
	for range 4 {
		var created struct{ SandboxID string }
		decode(t, c.do("POST", "/sandboxes", true, strings.NewReader(`{}`)), http.StatusCreated, &created)
		if !strings.HasPrefix(created.SandboxID, "n2") {
			t.Fatalf("created %s, want on n2", created.SandboxID)
		}
	}
	// The failed attempts were released: n1's CPUs are free in the placer.
	st, _ := c.g.placer.NodeStatus("n1")
	if st.InFlightCreates != 0 || st.ConfirmedCreates != 0 {
		t.Errorf("n1 still holds %d in flight, %d confirmed", st.InFlightCreates, st.ConfirmedCreates)
	}
	// The gateway confirms a create once the node's answer has been passed
	// on, so the client may read it a moment before the last confirm.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ = c.g.placer.NodeStatus("n2")
		if st.ConfirmedCreates == 4 && st.InFlightCreates == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if st.ConfirmedCreates != 4 || st.InFlightCreates != 0 {
		t.Errorf("n2 confirmed %d with %d in flight, want 4 and 0", st.ConfirmedCreates, st.InFlightCreates)
	}
}

// A drained node gets no creates until undrained.
func TestDrain(t *testing.T) {
	c := newTestCluster(t, 3)
	var st struct{ ID, State string }
	decode(t, c.do("POST", "/airlock/v1/nodes/n1/drain", true, nil), http.StatusOK, &st)
	c.store.mu.Lock()
	stored := c.store.nodes["n1"].State
	c.store.mu.Unlock()
	if st.State != cluster.StateDraining || stored != cluster.StateDraining {
		t.Fatalf("drain: %+v, stored %s", st, stored)
	}
	for range 8 {
		decode(t, c.do("POST", "/sandboxes", true, strings.NewReader(`{}`)), http.StatusCreated, nil)
	}
	if got := c.creates(); got["n1"] != 0 {
		t.Errorf("creates %v: n1 is draining", got)
	}
	c.refresh() // the store says draining too: it stays
	if s, _ := c.g.placer.NodeStatus("n1"); s.State != placement.Draining {
		t.Errorf("after a registry read: %v", s.State)
	}
	decode(t, c.do("POST", "/airlock/v1/nodes/n1/undrain", true, nil), http.StatusOK, &st)
	decode(t, c.do("POST", "/sandboxes", true, strings.NewReader(`{}`)), http.StatusCreated, nil)
	if got := c.creates(); got["n1"] != 1 {
		t.Errorf("creates %v: n1 is live again and the emptiest", got)
	}
	decode(t, c.do("POST", "/airlock/v1/nodes/zz/drain", true, nil), http.StatusNotFound, nil)

	var nodes []airlock.NodeInfo
	decode(t, c.do("GET", "/airlock/v1/nodes", true, nil), http.StatusOK, &nodes)
	if len(nodes) != 3 || nodes[0].ID != "n1" || nodes[0].State != "live" || nodes[0].CPUs != 8 || nodes[0].HeartbeatAgeMs != 1000 {
		t.Errorf("nodes: %+v", nodes)
	}
}

// A node whose admission refuses a create as full (other api instances
// filled it since its heartbeat) gets it placed again elsewhere; when every
// node is full the client is told the cluster is full.
func TestCreatePlacedAgainWhenNodeFull(t *testing.T) {
	c := newTestCluster(t, 2)
	full := func(n *fakeNode) {
		n.mu.Lock()
		n.handle = func(w http.ResponseWriter, r *http.Request) {
			writeTestJSON(w, http.StatusServiceUnavailable, map[string]any{"code": 503, "message": "node " + n.id + " is full: 8 of 8 CPUs held, the sandbox needs 2"})
		}
		n.mu.Unlock()
	}
	full(c.nodes["n1"])
	for range 4 {
		var created struct{ SandboxID string }
		decode(t, c.do("POST", "/sandboxes", true, strings.NewReader(`{}`)), http.StatusCreated, &created)
		if !strings.HasPrefix(created.SandboxID, "n2") {
			t.Fatalf("created %s, want on n2", created.SandboxID)
		}
	}
	if st, _ := c.g.placer.NodeStatus("n1"); st.InFlightCreates != 0 || st.ConfirmedCreates != 0 {
		t.Errorf("n1 still holds %d in flight, %d confirmed", st.InFlightCreates, st.ConfirmedCreates)
	}
	// Every node full (n1 by its own refusal, n2 by the 4 creates above):
	// the answer says the cluster is full and what the largest free slot
	// is, not one node's refusal or "1 excluded".
	full(c.nodes["n2"])
	var e struct{ Message string }
	decode(t, c.do("POST", "/sandboxes", true, strings.NewReader(`{}`)), http.StatusServiceUnavailable, &e)
	for _, want := range []string{"the cluster is full", "n1 refused it as full", "the largest free slot on any node is 0 CPUs and 8192 MiB memory (on n1)"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("every node full: %q lacks %q", e.Message, want)
		}
	}
	if strings.Contains(e.Message, "node n1 is full") || strings.Contains(e.Message, "node n2 is full") || strings.Contains(e.Message, "excluded") {
		t.Errorf("every node full: %q names one node as full", e.Message)
	}
	// Another 503 (not the admission's) is passed on as it is.
	n := c.nodes["n1"]
	n.mu.Lock()
	n.handle = func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, http.StatusServiceUnavailable, map[string]any{"code": 503, "message": "server is shutting down"})
	}
	n.mu.Unlock()
	c.nodes["n2"].srv.Close()
	decode(t, c.do("POST", "/sandboxes", true, strings.NewReader(`{}`)), http.StatusServiceUnavailable, &e)
	if e.Message != "server is shutting down" {
		t.Fatalf("a node's other 503: %q", e.Message)
	}
}

// Three nodes whose heartbeats say they have room, and whose admission
// refuses every create as full: the third refusal is not passed on ("node
// n3 is full"); the answer says the cluster is full, with the largest free
// slot by the nodes' own counts (n2: 1 CPU).
func TestCreateClusterFull(t *testing.T) {
	c := newTestCluster(t, 3)
	for id, held := range map[string]int{"n1": 8, "n2": 7, "n3": 8} {
		n := c.nodes[id]
		n.mu.Lock()
		n.handle = func(w http.ResponseWriter, r *http.Request) {
			writeTestJSON(w, http.StatusServiceUnavailable, map[string]any{"code": 503, "message": fmt.Sprintf("node %s is full: %d of 8 CPUs held, the sandbox needs 2", id, held)})
		}
		n.mu.Unlock()
	}
	var e struct{ Message string }
	decode(t, c.do("POST", "/sandboxes", true, strings.NewReader(`{}`)), http.StatusServiceUnavailable, &e)
	for _, want := range []string{"the cluster is full", "n1, n2, n3 refused it as full", "the largest free slot on any node is 1 CPUs and 8192 MiB memory (on n2)"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("%q lacks %q", e.Message, want)
		}
	}
	for id := range c.nodes {
		if st, _ := c.g.placer.NodeStatus(id); st.InFlightCreates != 0 || st.ConfirmedCreates != 0 {
			t.Errorf("%s still holds %d in flight, %d confirmed", id, st.InFlightCreates, st.ConfirmedCreates)
		}
	}
}
