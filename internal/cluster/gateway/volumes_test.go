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

	// The only volume node is draining: it still answers the list (and
	// says what its sandboxes mount), but nothing else goes there: 503.
	c.setNode("n2", func(n *cluster.Node) { n.State = cluster.StateDraining })
	decode(t, c.do("GET", "/volumes", true, nil), http.StatusOK, nil)
	decode(t, c.do("POST", "/volumes", true, strings.NewReader(`{"name":"x"}`)), http.StatusServiceUnavailable, nil)
	c.setNode("n2", func(n *cluster.Node) { n.State = cluster.StateLost })
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

// GET /volumes and GET /volumes/{id} merge what the volume nodes say of
// each volume's use: mountedBy names each node's own sandboxes, so the
// answer is their union; usedBytes the largest account; a node's 404 is
// the answer.
func TestVolumeUseMerged(t *testing.T) {
	c := newTestCluster(t, 3)
	serveVol := func(node string, mounted []string, used int64) {
		n := c.nodes[node]
		n.mu.Lock()
		defer n.mu.Unlock()
		n.handle = func(w http.ResponseWriter, r *http.Request) {
			v := map[string]any{"volumeID": "v1", "name": "data", "sizeMB": 16, "usedBytes": used, "token": "tok-" + node}
			if len(mounted) > 0 {
				v["mountedBy"] = mounted
			}
			switch r.URL.Path {
			case "/volumes":
				writeTestJSON(w, http.StatusOK, []any{v, map[string]any{"volumeID": "v2", "name": "other", "sizeMB": 16}})
			case "/volumes/v1":
				writeTestJSON(w, http.StatusOK, v)
			default:
				writeTestJSON(w, http.StatusNotFound, map[string]any{"code": 404, "message": "Volume not found"})
			}
		}
	}
	serveVol("n1", []string{"sb-n1-b", "sb-n1-a"}, 100)
	serveVol("n2", nil, 300)
	serveVol("n3", []string{"sb-n3"}, 200)
	for _, id := range []string{"n1", "n2", "n3"} {
		c.setNode(id, func(n *cluster.Node) { n.Labels = []string{cluster.LabelVolumes} })
	}
	type vol struct {
		VolumeID  string   `json:"volumeID"`
		Name      string   `json:"name"`
		Token     string   `json:"token"`
		UsedBytes *int64   `json:"usedBytes"`
		MountedBy []string `json:"mountedBy"`
	}
	var list []vol
	decode(t, c.do("GET", "/volumes", true, nil), http.StatusOK, &list)
	if len(list) != 2 || list[0].VolumeID != "v1" || list[1].VolumeID != "v2" {
		t.Fatalf("merged list %+v", list)
	}
	if got := strings.Join(list[0].MountedBy, ","); got != "sb-n1-a,sb-n1-b,sb-n3" || list[0].UsedBytes == nil || *list[0].UsedBytes != 300 {
		t.Fatalf("v1 in the list: mountedBy %q, usedBytes %v; want every node's sandboxes and the largest use", got, list[0].UsedBytes)
	}
	if list[1].MountedBy != nil || list[1].UsedBytes != nil {
		t.Fatalf("v2 got use it has on no node: %+v", list[1])
	}
	var one vol
	decode(t, c.do("GET", "/volumes/v1", true, nil), http.StatusOK, &one)
	if one.Token != "tok-n1" || strings.Join(one.MountedBy, ",") != "sb-n1-a,sb-n1-b,sb-n3" || *one.UsedBytes != 300 {
		t.Fatalf("GET /volumes/v1 merged: %+v", one)
	}
	decode(t, c.do("GET", "/volumes/nope", true, nil), http.StatusNotFound, nil)
}
