package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cluster"
)

// The volume API goes only to nodes with the shared volume root; the
// content API's token-only calls pass the api tier's key check and reach
// the node unauthenticated (it checks the token); creates with volume
// mounts are placed only on such nodes; a cluster without any refuses
// plainly. Before issue 27's cluster work /volumes went to any node and a
// token-only content call got the api tier's 401.
func TestVolumesGoToVolumeNodes(t *testing.T) {
	c := newTestCluster(t, 3)
	const vpath = "/volumecontent/0b5f5d2e-6c11-4b9e-9d0e-0123456789ab/file?path=/a"

	// No node has the root: volumes are off in this cluster.
	var e e2bError
	decode(t, c.do("GET", "/volumes", true, nil), http.StatusNotImplemented, &e)
	if !strings.Contains(e.Message, "--volume-root") {
		t.Errorf("no volume node: %q", e.Message)
	}
	decode(t, c.do("POST", "/sandboxes", true, strings.NewReader(`{"templateID":"base","volumeMounts":[{"name":"v","path":"/mnt/v"}]}`)), http.StatusBadRequest, &e)
	if !strings.Contains(e.Message, "--volume-root") {
		t.Errorf("create with mounts, no volume node: %q", e.Message)
	}

	c.setNode("n2", func(n *cluster.Node) { n.Labels = []string{cluster.LabelVolumes} })
	for range 4 {
		var got struct{ Node, Auth string }
		decode(t, c.do("GET", "/volumes", true, nil), http.StatusOK, &got)
		if got.Node != "n2" || got.Auth == "" {
			t.Fatalf("GET /volumes went to %s (authenticated %q), want n2, authenticated", got.Node, got.Auth)
		}
		decode(t, c.do("GET", vpath, false, nil, "Authorization", "Bearer some-volume-token"), http.StatusOK, &got)
		if got.Node != "n2" || got.Auth != "" {
			t.Fatalf("token-only content call went to %s (authenticated %q), want n2, not authenticated", got.Node, got.Auth)
		}
		decode(t, c.do("POST", "/sandboxes", true, strings.NewReader(`{"templateID":"base","volumeMounts":[{"name":"v","path":"/mnt/v"}]}`)), http.StatusCreated, nil)
	}
	if cr := c.creates(); cr["n2"] != 4 {
		t.Fatalf("creates with volume mounts went to %v, want all 4 on n2", cr)
	}
	// Without a key the control API is still refused by the api tier.
	decode(t, c.do("GET", "/volumes", false, nil), http.StatusUnauthorized, nil)

	// The only volume node is draining: 503.
	c.setNode("n2", func(n *cluster.Node) { n.State = cluster.StateDraining })
	decode(t, c.do("GET", "/volumes", true, nil), http.StatusServiceUnavailable, nil)
}

// A paused sandbox that mounts volumes moves only to a node with the
// shared volume root.
func TestMoveWithVolumesToVolumeNode(t *testing.T) {
	c := newTestCluster(t, 3)
	var adopted2, adopted3 []cluster.AdoptRequest
	c.adoptingNode(c.nodes["n2"], &adopted2)
	c.adoptingNode(c.nodes["n3"], &adopted3)
	for _, id := range []string{"n1", "n3"} {
		c.setNode(id, func(n *cluster.Node) { n.Labels = []string{cluster.LabelVolumes} })
	}
	for i := range 3 {
		id := "sv" + string(rune('a'+i))
		c.pausedOn(id, "n1", true)
		c.store.mu.Lock()
		rt := c.store.routes[id]
		rt.Volumes = true
		c.store.routes[id] = rt
		c.store.mu.Unlock()
	}
	c.setNode("n1", func(n *cluster.Node) { n.State = cluster.StateDraining })
	for i := range 3 {
		id := "sv" + string(rune('a'+i))
		var got map[string]any
		decode(t, c.do(http.MethodPost, "/sandboxes/"+id+"/connect", true, strings.NewReader(`{"timeout":60}`)), http.StatusOK, &got)
		if got["node"] != "n3" {
			t.Fatalf("a paused sandbox with volumes moved to %v, want n3 (the other node with the root)", got["node"])
		}
	}
	if len(adopted2) != 0 || len(adopted3) != 3 {
		t.Fatalf("adopted by n2: %d, by n3: %d; want 0 and 3", len(adopted2), len(adopted3))
	}
}
