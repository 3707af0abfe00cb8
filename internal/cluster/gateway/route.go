package gateway

import (
	"net/http"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/cluster"
)

// route sends an authorized API request where it belongs, by method and
// path (the routes of internal/api and internal/console).
func (g *Gateway) route(w http.ResponseWriter, r *http.Request) {
	m, p := r.Method, r.URL.Path
	seg := strings.Split(strings.Trim(p, "/"), "/")
	at := func(i int) string {
		if i < len(seg) {
			return seg[i]
		}
		return ""
	}
	switch {
	// The nodes' internal API is the gateway's own.
	case strings.HasPrefix(strings.ToLower(p), cluster.InternalPrefix):
		refuseInternal(w)

	// The gateway's own node API.
	case m == http.MethodGet && p == "/airlock/v1/nodes":
		g.listNodes(w, r)
	case m == http.MethodPost && len(seg) == 5 && seg[0] == "airlock" && seg[1] == "v1" && seg[2] == "nodes" &&
		(seg[4] == "drain" || seg[4] == "undrain"):
		g.setNodeState(w, r, seg[3], seg[4] == "drain")

	// Volumes: a node with the shared volume root (volumes.go).
	case isVolumeAPI(p):
		g.serveVolumes(w, r)

	// Creates: placed.
	case m == http.MethodPost && (p == "/sandboxes" || p == "/v2/sandboxes"):
		g.create(w, r)

	// Lists: every node's, merged.
	case m == http.MethodGet && p == "/v2/sandboxes":
		g.listV2(w, r)
	case m == http.MethodGet && p == "/sandboxes":
		g.listV1(w, r)
	case m == http.MethodGet && p == "/snapshots":
		g.listSnapshots(w, r)
	case m == http.MethodGet && p == "/sandboxes/metrics":
		g.listMetrics(w, r)
	case m == http.MethodGet && p == "/metrics":
		g.metrics(w, r)

	// One sandbox: its node.
	case seg[0] == "sandboxes" && len(seg) >= 2 && seg[1] != "metrics" && seg[1] != "":
		g.serveOwned(w, r, seg[1])
	case seg[0] == "v2" && at(1) == "sandboxes" && len(seg) >= 3 && seg[2] != "":
		g.serveOwned(w, r, seg[2])
	case len(seg) == 5 && seg[0] == "console" && seg[1] == "api" && seg[2] == "sandboxes" && seg[4] == "pty":
		g.serveOwned(w, r, seg[3])

	// Template builds: the build's node, the template's build node, or
	// (a new build) the least loaded node.
	case seg[0] == "templates" && at(2) == "builds" && at(3) != "":
		g.serveBuild(w, r, seg[1], seg[3])
	case seg[0] == "v2" && at(1) == "templates" && at(3) == "builds" && at(4) != "":
		g.serveBuild(w, r, seg[2], seg[4])
	case m == http.MethodGet && len(seg) == 4 && seg[0] == "templates" && seg[2] == "files":
		g.serveUploadLink(w, r, seg[1])
	case strings.HasPrefix(p, uploadPrefix) && m == http.MethodPut:
		g.serveUpload(w, r)
	case m == http.MethodPost && (p == "/v3/templates" || p == "/v2/templates" || p == "/templates"):
		g.serveNewBuild(w, r)
	case m == http.MethodPost && len(seg) == 5 && seg[0] == "airlock" && seg[1] == "v1" && seg[2] == "templates" && seg[4] == "build":
		g.serveNewBuild(w, r)

	// Templates: every node's list, merged; one template, a node holding it.
	case m == http.MethodGet && (p == "/templates" || p == "/v2/templates"):
		g.listTemplates(w, r)
	case (m == http.MethodPost || m == http.MethodDelete) && p == "/templates/tags":
		g.serveTags(w, r)
	case seg[0] == "templates" && at(1) == "aliases" && at(2) != "":
		g.serveTemplate(w, r, seg[2])
	case seg[0] == "templates" && at(1) != "":
		g.serveTemplate(w, r, seg[1])
	case len(seg) == 4 && seg[0] == "airlock" && seg[1] == "v1" && seg[2] == "templates":
		g.serveTemplate(w, r, seg[3])

	// Everything else (/secrets, /events, …): any live node. They share
	// the store, and every daemon has the same --secrets-key-file key, so
	// any node opens the secrets another sealed.
	default:
		g.serveAnyNode(w, r)
	}
}
