package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
	"github.com/airlock-sandbox/airlock/internal/cluster/wire"
)

const (
	testSecret = "cluster-secret-0123456789"
	testKey    = "test-api-key"
	testDomain = "example.com"
)

// fakeStore is an in-memory cluster.Store.
type fakeStore struct {
	mu             sync.Mutex
	nodes          map[string]cluster.Node
	sandboxes      map[string]string        // sandbox → node
	routes         map[string]cluster.Route // SandboxRoute beyond sandboxes
	tokens         []cluster.SandboxToken
	snapshots      map[string]string
	builds         map[string]string
	templateBuilds map[string]string
	lost           map[string]cluster.Lost
	fail           error // every call fails with it when set
	sandboxReads   int
	tokenReads     int // SandboxTokens calls
	watch          chan cluster.RouteChange
}

func newFakeStore() *fakeStore {
	return &fakeStore{nodes: map[string]cluster.Node{}, sandboxes: map[string]string{}, snapshots: map[string]string{},
		builds: map[string]string{}, templateBuilds: map[string]string{}, lost: map[string]cluster.Lost{},
		routes: map[string]cluster.Route{}, watch: make(chan cluster.RouteChange, 16)}
}

func (s *fakeStore) Heartbeat(ctx context.Context, n cluster.Node) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[n.ID] = n
	return n.State, nil
}

func (s *fakeStore) SetNodeState(ctx context.Context, id, state string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[id]
	if !ok {
		return cluster.ErrNotFound
	}
	n.State = state
	s.nodes[id] = n
	return nil
}

func (s *fakeStore) Nodes(ctx context.Context) ([]cluster.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	var out []cluster.Node
	for _, n := range s.nodes {
		out = append(out, n)
	}
	return out, nil
}

func (s *fakeStore) RemoveNode(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, id)
	return nil
}

func (s *fakeStore) lookup(m map[string]string, key string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return "", s.fail
	}
	if v, ok := m[key]; ok {
		return v, nil
	}
	return "", cluster.ErrNotFound
}

func (s *fakeStore) SandboxNode(ctx context.Context, id string) (string, error) {
	s.mu.Lock()
	s.sandboxReads++
	s.mu.Unlock()
	return s.lookup(s.sandboxes, id)
}
func (s *fakeStore) SandboxRoute(ctx context.Context, id string) (cluster.Route, error) {
	s.mu.Lock()
	rt, ok := s.routes[id]
	s.mu.Unlock()
	if ok {
		return rt, nil
	}
	n, err := s.lookup(s.sandboxes, id)
	return cluster.Route{NodeID: n, State: "running"}, err
}
func (s *fakeStore) SnapshotNode(ctx context.Context, id string) (string, error) {
	return s.lookup(s.snapshots, id)
}
func (s *fakeStore) BuildNode(ctx context.Context, id string) (string, error) {
	return s.lookup(s.builds, id)
}
func (s *fakeStore) TemplateBuildNode(ctx context.Context, id string) (string, error) {
	return s.lookup(s.templateBuilds, id)
}

func (s *fakeStore) SandboxTokens(ctx context.Context) ([]cluster.SandboxToken, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokenReads++
	return slices.Clone(s.tokens), s.fail
}

func (s *fakeStore) Touch(ctx context.Context, id string) error { return nil }

func (s *fakeStore) ReapLostNodes(ctx context.Context, bound time.Duration) ([]cluster.Node, error) {
	return nil, nil
}

func (s *fakeStore) LostSandbox(ctx context.Context, id string) (cluster.Lost, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.lost[id]; ok {
		return l, nil
	}
	return cluster.Lost{}, cluster.ErrNotFound
}

func (s *fakeStore) WatchRoutes(ctx context.Context) (<-chan cluster.RouteChange, error) {
	out := make(chan cluster.RouteChange)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case rc := <-s.watch:
				select {
				case out <- rc:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// fakeNode is a node daemon: it refuses requests without exactly the
// cluster secret, stamps cluster.HeaderNode and answers by path.
type fakeNode struct {
	t   *testing.T
	id  string
	srv *httptest.Server
	tls *clustertls.Material

	mu        sync.Mutex
	creates   int
	seen      []*http.Request
	sandboxes []listed // what GET /v2/sandboxes lists
	handle    http.HandlerFunc
}

type listed struct {
	SandboxID string    `json:"sandboxID"`
	StartedAt time.Time `json:"startedAt"`
	State     string    `json:"state"`
}

func newFakeNode(t *testing.T, id string) *fakeNode {
	n := &fakeNode{t: t, id: id, tls: nodeTLS(t, id)}
	n.srv = httptest.NewUnstartedServer(http.HandlerFunc(n.serve))
	n.srv.TLS = n.tls.ServerConfig()
	n.srv.StartTLS()
	t.Cleanup(n.srv.Close)
	return n
}

func (n *fakeNode) addr() string { return n.srv.Listener.Addr().String() }

func (n *fakeNode) serve(w http.ResponseWriter, r *http.Request) {
	if !clustertls.APIClient(n.tls.Roots, r.TLS) {
		n.t.Errorf("node %s: %s %s arrived without the api tier's client certificate", n.id, r.Method, r.URL.Path)
		http.Error(w, "no client certificate", http.StatusUnauthorized)
		return
	}
	if got := r.Header.Values(cluster.HeaderSecret); len(got) != 1 || got[0] != testSecret {
		n.t.Errorf("node %s: %s %s arrived with the secret header %q", n.id, r.Method, r.URL.Path, got)
		http.Error(w, "no secret", http.StatusForbidden)
		return
	}
	w.Header().Set(cluster.HeaderNode, n.id)
	n.mu.Lock()
	n.seen = append(n.seen, r)
	h := n.handle
	n.mu.Unlock()
	if h != nil {
		h(w, r)
		return
	}
	switch {
	case r.Method == http.MethodPost && (r.URL.Path == "/sandboxes" || r.URL.Path == "/v2/sandboxes"):
		body, _ := io.ReadAll(r.Body)
		n.mu.Lock()
		n.creates++
		c := n.creates
		n.mu.Unlock()
		w.Header().Set(cluster.HeaderGen, "100")
		writeTestJSON(w, http.StatusCreated, map[string]any{"sandboxID": fmt.Sprintf("%ss%d", n.id, c), "body": string(body)})
	case r.Method == http.MethodGet && r.URL.Path == "/v2/sandboxes":
		n.listV2(w, r)
	default:
		writeTestJSON(w, http.StatusOK, map[string]any{"node": n.id, "path": r.URL.Path, "host": r.Host, "query": r.URL.RawQuery,
			"auth": r.Header.Get(cluster.HeaderAuthenticated)})
	}
}

// listV2 pages the node's sandboxes as internal/api does.
func (n *fakeNode) listV2(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	asc := q.Get("order") == "asc"
	limit := 100
	if v := q.Get("limit"); v != "" {
		limit, _ = strconv.Atoi(v)
	}
	n.mu.Lock()
	all := slices.Clone(n.sandboxes)
	n.mu.Unlock()
	cmp := func(a, b listed) int {
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		if a.SandboxID < b.SandboxID {
			return -1
		}
		if a.SandboxID > b.SandboxID {
			return 1
		}
		return 0
	}
	slices.SortFunc(all, func(a, b listed) int {
		if asc {
			return cmp(a, b)
		}
		return cmp(b, a)
	})
	if tok := q.Get("nextToken"); tok != "" {
		c, err := wire.DecodeCursor(tok)
		if err != nil {
			writeTestJSON(w, http.StatusBadRequest, map[string]any{"code": 400, "message": err.Error()})
			return
		}
		pos := listed{SandboxID: c.ID, StartedAt: c.StartedAt}
		i := 0
		for i < len(all) {
			d := cmp(all[i], pos)
			if (asc && d > 0) || (!asc && d < 0) {
				break
			}
			i++
		}
		all = all[i:]
	}
	if len(all) > limit {
		all = all[:limit]
		last := all[len(all)-1]
		w.Header().Set("X-Next-Token", wire.EncodeCursor(wire.Cursor{StartedAt: last.StartedAt, ID: last.SandboxID, Asc: asc}))
	}
	w.Header().Set("X-Total-Running", strconv.Itoa(len(n.sandboxes)))
	writeTestJSON(w, http.StatusOK, all)
}

func writeTestJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// cluster is a gateway with fake nodes n1..nN (8 CPUs, 8 GiB, template
// base each) in a fake store, its registry read once.
type testCluster struct {
	t     *testing.T
	store *fakeStore
	nodes map[string]*fakeNode
	g     *Gateway
	srv   *httptest.Server
}

func newTestCluster(t *testing.T, nodes int, opts ...func(*Options)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, store: newFakeStore(), nodes: map[string]*fakeNode{}}
	for i := 1; i <= nodes; i++ {
		id := fmt.Sprintf("n%d", i)
		fn := newFakeNode(t, id)
		c.nodes[id] = fn
		c.store.nodes[id] = cluster.Node{ID: id, Addr: fn.addr(), State: cluster.StateLive, Runtime: "gvisor", Gen: 1,
			CPUs: 8, MemoryMB: 8192, Templates: []string{"base"}, Age: time.Second, StartedAt: time.Now().Add(-time.Hour)}
	}
	o := Options{Store: c.store, Secret: testSecret, TLS: apiTLS(t), APIKey: testKey, Domain: testDomain,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Placement: placementSeed(1)}
	for _, f := range opts {
		f(&o)
	}
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	c.g = g
	c.refresh()
	c.srv = httptest.NewServer(g)
	t.Cleanup(c.srv.Close)
	return c
}

// refresh reads the nodes table as the registry loop does.
func (c *testCluster) refresh() {
	c.t.Helper()
	if err := c.g.refresh(context.Background()); err != nil {
		c.t.Fatal(err)
	}
}

// setNode changes a node's row.
func (c *testCluster) setNode(id string, f func(*cluster.Node)) {
	c.store.mu.Lock()
	n := c.store.nodes[id]
	f(&n)
	c.store.nodes[id] = n
	c.store.mu.Unlock()
	c.refresh()
}

// do sends a request to the gateway; key adds the API key.
func (c *testCluster) do(method, path string, key bool, body io.Reader, hdr ...string) *http.Response {
	c.t.Helper()
	req, err := http.NewRequest(method, c.srv.URL+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if key {
		req.Header.Set("X-API-Key", testKey)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

// decode reads a JSON answer and checks its status.
func decode(t *testing.T, resp *http.Response, status int, v any) {
	t.Helper()
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d: %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, data)
	}
	if v != nil {
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("decoding %s: %v", data, err)
		}
	}
}

type e2bError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

var errStoreDown = errors.New("store down")
