package gateway

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/cluster"
)

// Volumes in a cluster (issue 27). A volume's record is a row of the shared
// store (its name unique cluster-wide: the store's constraint), and its
// data a directory on the filesystem the volume nodes share
// (--volume-root, cluster.LabelVolumes). So any such node serves the
// control API (/volumes) and the content API (/volumecontent) of any
// volume, and the api tier sends each request to one of them. Content
// calls that carry only the volume's token (E2B's SDKs send no API key
// there) pass the api tier's key check; the node checks the token, whose
// key derives from the cluster's one API key.

// isVolumeAPI reports whether path is the volume API's.
func isVolumeAPI(p string) bool {
	return p == "/volumes" || strings.HasPrefix(p, "/volumes/") || strings.HasPrefix(p, "/volumecontent/")
}

// volumeContent reports whether r is a content API request, which the node
// authorises itself (by the volume's token or the API key).
func volumeContent(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/volumecontent/") && !strings.Contains(r.URL.Path, "..")
}

// volumeNodes are the live nodes with the shared volume root, in a random
// order (the load spreads), and whether any node in any state has it.
func (g *Gateway) volumeNodes() (live []cluster.Node, any bool) {
	for _, n := range g.nodesIn(cluster.StateLive, cluster.StateDraining, cluster.StateLost) {
		if !slices.Contains(n.Labels, cluster.LabelVolumes) {
			continue
		}
		any = true
		if effectiveState(n) == cluster.StateLive {
			live = append(live, n)
		}
	}
	rand.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	return live, any
}

// noVolumeNodes is the refusal when no node can serve volumes: 501 when no
// node has the shared root (volumes are off in this cluster), 503 when
// none of those that have it is live.
func noVolumeNodes(w http.ResponseWriter, r *http.Request, any bool) {
	if !any {
		writeError(w, r, http.StatusNotImplemented, "volumes are not enabled in this cluster: no node has the shared volume root (airlock serve --volume-root)")
		return
	}
	writeError(w, r, http.StatusServiceUnavailable, "no live node has the shared volume root")
}

// serveVolumes forwards a volume API request to a live node with the
// shared root (the next one if it cannot be reached and the request has
// no body to resend).
func (g *Gateway) serveVolumes(w http.ResponseWriter, r *http.Request) {
	nodes, any := g.volumeNodes()
	if len(nodes) == 0 {
		noVolumeNodes(w, r, any)
		return
	}
	resend := r.ContentLength == 0
	for i, n := range nodes {
		retry := resend && i < len(nodes)-1
		a := g.forward(w, r, n, retry)
		if a.err == nil || !retry || r.Context().Err() != nil {
			return
		}
		g.log.Warn("volume request: node unreachable; trying the next", "node", n.ID, "addr", n.Addr, "err", a.err)
	}
}

// mountsVolumes reports whether a create body asks for volume mounts.
func mountsVolumes(body []byte) bool {
	var req struct {
		VolumeMounts []json.RawMessage `json:"volumeMounts"`
	}
	return json.Unmarshal(body, &req) == nil && len(req.VolumeMounts) > 0
}
