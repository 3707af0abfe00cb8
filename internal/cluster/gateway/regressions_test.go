package gateway

// Regressions found in review (issue 17): each failed before its fix.

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/placement"
)

// A create whose answer breaks off mid-body (the node dies, or the copy to
// the client fails) makes httputil.ReverseProxy panic with
// http.ErrAbortHandler inside g.forward: create() never reaches Confirm or
// Release, and the reservation counts against the node for good.
func TestRegressionCreateAbortLeaksReservation(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.nodes["n1"]
	n.handle = func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeTestJSON(w, http.StatusOK, map[string]any{})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		w.Header().Set(cluster.HeaderGen, "100")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"sandboxID":`))
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	req, _ := http.NewRequest("POST", c.srv.URL+"/sandboxes", strings.NewReader(`{"templateID":"base"}`))
	req.Header.Set("X-API-Key", testKey)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_, _ = resp.Body.Read(make([]byte, 2000))
		resp.Body.Close()
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		st, _ := c.g.placer.NodeStatus("n1")
		if st.InFlightCreates == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the create ended (aborted answer) but its reservation is still in flight: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// DELETE /templates/{snapshotID} is how a named snapshot is deleted
// (internal/api deleteSnapshot); the gateway sends it to a node holding a
// *template* of that name, else any node (the lowest id), not to the
// snapshot's node, which the store knows (SnapshotNode).
func TestRegressionDeleteSnapshotGoesToItsNode(t *testing.T) {
	c := newTestCluster(t, 3)
	c.store.mu.Lock()
	c.store.snapshots["snapabc"] = "n3"
	c.store.mu.Unlock()
	resp := c.do("DELETE", "/templates/snapabc", true, nil)
	resp.Body.Close()
	if got := resp.Header.Get(cluster.HeaderNode); got != "n3" {
		t.Fatalf("DELETE /templates/<snapshot on n3> went to node %q, want n3", got)
	}
}

// A list fans out to every live node with no deadline: one node that
// accepts the request but never answers (a wedged daemon whose heartbeat
// is still fresh) hangs every list until the client gives up, instead of
// being left out and named in X-Airlock-Partial.
func TestRegressionListHangsOnStuckNode(t *testing.T) {
	c := newTestCluster(t, 2)
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	c.nodes["n2"].handle = func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stuck:
		case <-r.Context().Done():
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.srv.URL+"/v2/sandboxes", nil)
	req.Header.Set("X-API-Key", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /v2/sandboxes with one stuck node: no answer in 20s: %v", err)
	}
	resp.Body.Close()
	if resp.Header.Get(HeaderPartial) != "n2" {
		t.Fatalf("want n2 left out, got status %d partial %q", resp.StatusCode, resp.Header.Get(HeaderPartial))
	}
}

// On a single host the console's pages are public (the page asks for the
// key) and its pty authenticates in its first WebSocket message (browsers
// cannot set X-API-Key on a WebSocket); the api tier refuses both without
// an X-API-Key header, so the console cannot be used through it.
func TestRegressionConsoleThroughAPITier(t *testing.T) {
	c := newTestCluster(t, 1)
	c.store.mu.Lock()
	c.store.sandboxes["sb1"] = "n1"
	c.store.mu.Unlock()
	// (The terminal's WebSocket, keyed in its first message, is
	// TestBrowserPTY's.)
	for _, p := range []string{"/console/", "/console/assets/x.js"} {
		resp := c.do("GET", p, false, nil, "Accept", "text/html")
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			t.Errorf("GET %s without X-API-Key: 401 from the api tier (public on a single host)", p)
		}
	}
}

// `airlock node drain` (or undrain) of a node the reaper marked lost
// overwrites 'lost': when the node's heartbeats get through again it reads
// 'draining'/'live', never reconciles, and the sandboxes the api tier
// reported lost keep running on it (and holding its capacity).
func TestRegressionDrainOfLostNodeClearsLoss(t *testing.T) {
	c := newTestCluster(t, 2)
	c.setNode("n2", func(n *cluster.Node) { n.State = cluster.StateLost; n.Age = time.Minute })
	resp := c.do("POST", "/airlock/v1/nodes/n2/drain", true, nil)
	resp.Body.Close()
	c.store.mu.Lock()
	st := c.store.nodes["n2"].State
	c.store.mu.Unlock()
	if st != cluster.StateLost {
		t.Fatalf("drain of a lost node: status %d, stored state now %q (the node will never reconcile)", resp.StatusCode, st)
	}
}

// slowStore's first Nodes call reads the rows at once but returns them
// only when release is closed: a registry read that a slow query delayed.
type slowStore struct {
	*fakeStore
	calls   int
	gate    bool
	release chan struct{}
	read    chan struct{}
}

func (s *slowStore) Nodes(ctx context.Context) ([]cluster.Node, error) {
	rows, err := s.fakeStore.Nodes(ctx)
	s.fakeStore.mu.Lock()
	s.calls++
	first := s.gate && s.calls == 1
	s.fakeStore.mu.Unlock()
	if first {
		close(s.read)
		<-s.release
	}
	return rows, err
}

// refresh runs unserialised (runRegistry, create's re-read and lookupNode's
// are not under one lock): a read that started before a node registered
// but ends after a newer read removes that node from the registry and the
// placer again, voiding the reservations placed on it meanwhile (they end
// as no-ops) until the next read.
func TestRegressionConcurrentRefreshForgetsNode(t *testing.T) {
	fs := newFakeStore()
	for _, id := range []string{"n1", "n2", "n3"} {
		fn := newFakeNode(t, id)
		fs.nodes[id] = cluster.Node{ID: id, Addr: fn.addr(), State: cluster.StateLive, Runtime: "gvisor", Gen: 1,
			CPUs: 8, MemoryMB: 8192, Templates: []string{"base"}, Age: time.Second, StartedAt: time.Now().Add(-time.Hour)}
	}
	n3 := fs.nodes["n3"]
	delete(fs.nodes, "n3")
	ss := &slowStore{fakeStore: fs, release: make(chan struct{}), read: make(chan struct{})}
	c := newTestCluster(t, 0, func(o *Options) { o.Store = ss })
	g := c.g
	// newTestCluster's own refresh was ungated: gate the next read.
	ss.fakeStore.mu.Lock()
	ss.calls, ss.gate = 0, true
	ss.fakeStore.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- g.refresh(context.Background()) }() // the slow read: n1, n2
	<-ss.read
	fs.mu.Lock()
	fs.nodes["n3"] = n3 // n3 registers
	fs.mu.Unlock()
	// A newer read: reads are serialised, so it runs after the slow one.
	newer := make(chan error, 1)
	go func() { newer <- g.refresh(context.Background()) }()
	close(ss.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-newer; err != nil {
		t.Fatal(err)
	}
	res, err := g.placer.Place(placementRequest("n1", "n2"))
	if err != nil || res.NodeID() != "n3" {
		t.Fatalf("place on n3: %v", err)
	}
	if err := g.refresh(context.Background()); err != nil { // the registry's next tick
		t.Fatal(err)
	}
	if _, ok := g.node("n3"); !ok {
		t.Errorf("n3 registered, yet the registry forgot it after the older read ended")
	}
	if st, ok := g.placer.NodeStatus("n3"); !ok || st.InFlightCreates != 1 {
		t.Errorf("the create in flight on n3 is no longer counted: %+v (known %v)", st, ok)
	}
}

func placementRequest(exclude ...string) placement.Request {
	return placement.Request{Template: "base", TemplateRequired: true,
		Resources: placement.Resources{CPUCount: 2, MemoryMB: 512}, Exclude: exclude}
}

// The gateway routes a create to a snapshot's node before it looks at
// templates; a node resolves the template first (sandbox.Manager.Create).
// A node refuses a snapshot name only when the template is on its own
// disk (CreateSnapshot → Templates.Resolve, and a shared template manager
// says "not on this node"), so in a cluster a snapshot on n2 may be called
// like n1's template: every create of that template then goes to n2
// (bypassing placement) and starts the snapshot instead.
func TestRegressionSnapshotNameShadowsTemplate(t *testing.T) {
	c := newTestCluster(t, 2)
	c.setNode("n1", func(n *cluster.Node) { n.Templates = []string{"base", "myapp"} })
	c.store.mu.Lock()
	c.store.snapshots["myapp"] = "n2" // a snapshot named myapp, made on n2
	c.store.mu.Unlock()
	resp := c.do("POST", "/v2/sandboxes", true, strings.NewReader(`{"templateID":"myapp"}`))
	resp.Body.Close()
	if got := resp.Header.Get(cluster.HeaderNode); got != "n1" {
		t.Fatalf("create of template myapp (held by n1 only) went to %q", got)
	}
}
