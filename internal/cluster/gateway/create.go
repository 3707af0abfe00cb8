package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/placement"
)

// maxCreateBody caps a create's body (internal/api's maxBodyBytes).
const maxCreateBody = 1 << 20

// createAttempts is how many nodes a create tries: more after a node that
// could not be reached or said it is full.
const createAttempts = 3

// create places POST /sandboxes and POST /v2/sandboxes: on the node of the
// snapshot it starts from, else on the node placement picks among those
// holding the template; a node that cannot be reached is left out and the
// create placed once more.
func (g *Gateway) create(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCreateBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", mbe.Limit))
			return
		}
		writeError(w, r, http.StatusBadRequest, fmt.Sprintf("reading the request body: %v", err))
		return
	}
	var req struct {
		TemplateID string `json:"templateID"`
	}
	_ = json.Unmarshal(body, &req) // a bad body: the node answers 400
	tpl := req.TemplateID
	if tpl == "" {
		tpl = "base"
	}
	withBody := func() *http.Request {
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Del("Transfer-Encoding")
		r.TransferEncoding = nil
		return r
	}

	// A template comes before a snapshot of the same name, as on a node
	// (found in review: a snapshot named like another node's template took
	// that template's creates).
	snapNode, err := "", error(cluster.ErrNotFound)
	if !g.anyNodeHolds(tpl) {
		snapNode, err = g.store.SnapshotNode(r.Context(), tpl)
	}
	preq := placement.Request{Template: tpl, TemplateRequired: !g.opts.PullTemplates, Resources: g.templateResources(r, tpl)}
	if mountsVolumes(body) { // only a node with the shared volume root (volumes.go)
		if _, any := g.volumeNodes(); !any {
			writeError(w, r, http.StatusBadRequest, "Volume mounts are not enabled: no node of this cluster has the shared volume root (airlock serve --volume-root)")
			return
		}
		preq.Labels = append(preq.Labels, cluster.LabelVolumes)
	}
	switch {
	case err == nil:
		n, ok := g.lookupNode(r.Context(), snapNode)
		st := cluster.StateLost
		if ok {
			st = effectiveState(n)
		}
		if st == cluster.StateLive {
			a := g.forward(w, withBody(), n, g.opts.PullTemplates)
			if a.responded || a.err == nil || r.Context().Err() != nil {
				return
			}
			if !notSent(a.err) {
				writeError(w, r, http.StatusBadGateway, unreachable(n, a.err))
				return
			}
			// Its node cannot be reached (crashed, not marked lost yet): the
			// snapshot is in the artifact store, any other node starts it.
			g.log.Warn("create from a snapshot: its node is unreachable; placing it elsewhere", "node", n.ID, "snapshot", tpl, "err", a.err)
			st = "unreachable"
		}
		if !g.opts.PullTemplates {
			writeError(w, r, http.StatusServiceUnavailable, fmt.Sprintf("snapshot %s is on node %s, which is %s", tpl, snapNode, st))
			return
		}
		// Snapshots are in the artifact store: any other node fetches it.
		preq = placement.Request{Resources: preq.Resources, Labels: preq.Labels, Exclude: []string{snapNode}}
	case !errors.Is(err, cluster.ErrNotFound):
		writeError(w, r, http.StatusServiceUnavailable, storeError(err).msg)
		return
	}

	// full holds the nodes that refused this create as full, with their
	// refusal: when none is left, the answer says the cluster is full.
	full := map[string]string{}
	for i := range createAttempts {
		res, err := g.placer.Place(preq)
		if err != nil && !g.anyNodeHolds(tpl) && g.refreshSince(r.Context(), arrived) == nil {
			// A node records a template it built with a heartbeat before the
			// build's answer ends: read the nodes again before refusing.
			res, err = g.placer.Place(preq)
		}
		if err != nil {
			// A template built moments ago is on its build node before that
			// node's next heartbeat says so: send the create there.
			if n, ok := g.freshBuildNode(r, tpl); ok && errors.Is(err, placement.ErrNoCapacity) {
				g.forward(w, withBody(), n, false)
				return
			}
			if !g.anyNodeHolds(tpl) {
				// No node, in any state, has it: the node's own answer.
				writeError(w, r, http.StatusNotFound, fmt.Sprintf("template '%s' not found", tpl))
				return
			}
			if len(full) > 0 && errors.Is(err, placement.ErrNoCapacity) {
				g.clusterFull(w, r, preq, full)
				return
			}
			placementError(w, r, err)
			return
		}
		// Ended here whatever happens, a panic included: ReverseProxy aborts
		// the handler (http.ErrAbortHandler) when the answer breaks off, and
		// a reservation left open would count on the node for good (found
		// in review). After Confirm it does nothing.
		defer res.Release()
		n, ok := g.lookupNode(r.Context(), res.NodeID())
		if !ok { // removed since the registry's read
			res.Release()
			preq.Exclude = append(slices.Clip(preq.Exclude), res.NodeID())
			continue
		}
		last := i == createAttempts-1
		a := g.forwardAttempt(w, withBody(), &attempt{node: n, retry: !last, replaceFull: true})
		if a.responded && a.status >= 200 && a.status < 300 {
			res.Confirm(a.gen)
			return
		}
		res.Release()
		if a.full && r.Context().Err() == nil {
			// Its admission refused the create before taking anything (other
			// api instances' creates filled it since its last heartbeat).
			full[n.ID] = a.fullMsg
			if last {
				g.clusterFull(w, r, preq, full)
				return
			}
			g.log.Info("create: node full; placing again without it", "node", n.ID, "template", tpl)
			preq.Exclude = append(slices.Clip(preq.Exclude), n.ID)
			continue
		}
		if a.responded || last || r.Context().Err() != nil || !notSent(a.err) {
			// Only a create that never reached the node is placed again: one
			// that did may have made a sandbox there.
			if !a.responded && !last && r.Context().Err() == nil {
				writeError(w, r, http.StatusBadGateway, unreachable(n, a.err))
			}
			return
		}
		g.log.Warn("create: node unreachable; placing again without it", "node", n.ID, "addr", n.Addr, "template", tpl, "err", a.err)
		preq.Exclude = append(slices.Clip(preq.Exclude), n.ID)
	}
	writeError(w, r, http.StatusServiceUnavailable, "no node could take the sandbox: the nodes placement chose are gone")
}

// templateResources is what a create of tpl needs (Options.Template, else
// 2 CPUs and 512 MiB).
func (g *Gateway) templateResources(r *http.Request, tpl string) placement.Resources {
	res := placement.Resources{CPUCount: defaultCPUs, MemoryMB: defaultMemoryMB}
	if g.opts.Template == nil {
		return res
	}
	cpus, mem, err := g.opts.Template(r.Context(), tpl)
	if err != nil {
		g.log.Debug("template resources unknown; using the defaults", "template", tpl, "err", err)
		return res
	}
	if cpus > 0 {
		res.CPUCount = cpus
	}
	if mem > 0 {
		res.MemoryMB = int64(mem)
	}
	return res
}

// anyNodeHolds reports whether some registered node (live, draining or
// lost) stated tpl among its templates: a create of a template no node
// has is a 404, as on a single host, not a full cluster.
func (g *Gateway) anyNodeHolds(tpl string) bool {
	for _, n := range g.nodesIn(cluster.StateLive, cluster.StateDraining, cluster.StateLost) {
		if slices.Contains(n.Templates, tpl) {
			return true
		}
	}
	return false
}

// freshBuildNode is the live node of tpl's newest build when no heartbeat
// has listed tpl yet (a build that just ended), else false.
func (g *Gateway) freshBuildNode(r *http.Request, tpl string) (cluster.Node, bool) {
	if g.anyNodeHolds(tpl) {
		return cluster.Node{}, false
	}
	name, _, _ := strings.Cut(tpl, ":")
	id, err := g.store.TemplateBuildNode(r.Context(), name)
	if err != nil {
		return cluster.Node{}, false
	}
	n, ok := g.lookupNode(r.Context(), id)
	if !ok || effectiveState(n) != cluster.StateLive {
		return cluster.Node{}, false
	}
	return n, true
}

// notSent reports whether a forwarding error happened before the request
// reached the node (the connection could not be made).
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
