package gateway

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"

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
	if r.Method == http.MethodGet && (r.URL.Path == "/volumes" ||
		(strings.HasPrefix(r.URL.Path, "/volumes/") && !strings.Contains(strings.TrimPrefix(r.URL.Path, "/volumes/"), "/"))) {
		g.volumesWithUse(w, r)
		return
	}
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

// volumesWithUse answers GET /volumes and GET /volumes/{id} from every
// live and draining node with the shared root: each node names, in
// mountedBy (an Airlock extension), only its own sandboxes, so the answers
// are merged: the first node's (its token, its fields), with mountedBy the
// union of all and usedBytes the largest (each node keeps its own account
// of a volume's use). A node that fails is left out (X-Airlock-Partial); a
// 4xx (an unknown volume) is the answer.
func (g *Gateway) volumesWithUse(w http.ResponseWriter, r *http.Request) {
	var nodes []cluster.Node
	any := false
	for _, n := range g.nodesIn(cluster.StateLive, cluster.StateDraining, cluster.StateLost) {
		if slices.Contains(n.Labels, cluster.LabelVolumes) {
			any = true
			if st := effectiveState(n); st == cluster.StateLive || st == cluster.StateDraining {
				nodes = append(nodes, n)
			}
		}
	}
	if len(nodes) == 0 {
		noVolumeNodes(w, r, any)
		return
	}
	answers := make([]nodeAnswer, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { answers[i] = g.ask(r, n) })
	}
	wg.Wait()
	good, ok := g.merged(w, r, answers)
	if !ok {
		return
	}
	body := good[0].body
	if merged, err := mergeVolumeUse(r.URL.Path == "/volumes", good); err == nil {
		body = merged
	} else {
		g.log.Warn("volumes: answers not merged", "path", r.URL.Path, "err", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(good[0].status)
	_, _ = w.Write(body)
}

// mergeVolumeUse merges the nodes' answers (a list, or one volume): the
// first answer's objects as they are, each with mountedBy the sorted union
// of every answer's and usedBytes the largest.
func mergeVolumeUse(list bool, answers []nodeAnswer) ([]byte, error) {
	decode := func(b []byte) ([]map[string]json.RawMessage, error) {
		var out []map[string]json.RawMessage
		if list {
			err := json.Unmarshal(b, &out)
			return out, err
		}
		var one map[string]json.RawMessage
		if err := json.Unmarshal(b, &one); err != nil {
			return nil, err
		}
		return []map[string]json.RawMessage{one}, nil
	}
	first, err := decode(answers[0].body)
	if err != nil {
		return nil, err
	}
	type use struct {
		mounted []string
		used    *int64
	}
	uses := map[string]*use{}
	for _, a := range answers {
		vols, err := decode(a.body)
		if err != nil {
			return nil, err
		}
		for _, v := range vols {
			var id string
			if json.Unmarshal(v["volumeID"], &id) != nil || id == "" {
				continue
			}
			u := uses[id]
			if u == nil {
				u = &use{}
				uses[id] = u
			}
			var m []string
			if raw, ok := v["mountedBy"]; ok && json.Unmarshal(raw, &m) == nil {
				u.mounted = append(u.mounted, m...)
			}
			var n int64
			if raw, ok := v["usedBytes"]; ok && json.Unmarshal(raw, &n) == nil && (u.used == nil || n > *u.used) {
				u.used = &n
			}
		}
	}
	for _, v := range first {
		var id string
		if json.Unmarshal(v["volumeID"], &id) != nil {
			continue
		}
		u := uses[id]
		if u == nil {
			continue
		}
		if len(u.mounted) > 0 {
			slices.Sort(u.mounted)
			v["mountedBy"], _ = json.Marshal(slices.Compact(u.mounted))
		}
		if u.used != nil {
			v["usedBytes"], _ = json.Marshal(*u.used)
		}
	}
	if list {
		return json.Marshal(first)
	}
	return json.Marshal(first[0])
}
