package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/placement"
)

// uploadPrefix is the path of a template file upload URL (internal/api's
// PUT /airlock/v1/template-files/{hash}).
const uploadPrefix = "/airlock/v1/template-files/"

// uploadTemplateParam is the query parameter the gateway adds to the
// upload URLs it passes on: the template whose build node takes the upload
// (the node's signature covers only the hash and the expiry).
const uploadTemplateParam = "template"

// signedUpload reports whether r has the shape of a signed template file
// upload (internal/api's signedUpload), which needs no API key: the node
// checks the signature.
func signedUpload(r *http.Request) bool {
	if r.Method != http.MethodPut || len(r.URL.Path) <= len(uploadPrefix) || r.URL.Path[:len(uploadPrefix)] != uploadPrefix {
		return false
	}
	q := r.URL.Query()
	return q.Get("expires") != "" && q.Get("signature") != ""
}

// serveOn forwards r to node id; what names the routed thing in errors.
func (g *Gateway) serveOn(w http.ResponseWriter, r *http.Request, id, what string, a *attempt) {
	n, ok := g.lookupNode(r.Context(), id)
	if !ok {
		writeError(w, r, http.StatusBadGateway, fmt.Sprintf("node %s of %s is not registered", id, what))
		return
	}
	if effectiveState(n) == cluster.StateLost {
		writeError(w, r, http.StatusNotFound, fmt.Sprintf("%s was on node %s, which was lost (no heartbeat for %s)", what, n.ID, n.Age.Round(time.Second)))
		return
	}
	if a == nil {
		a = &attempt{}
	}
	a.node = n
	g.forwardAttempt(w, r, a)
}

// serveBuild forwards a request about a template build to the node running
// it (or, unknown build, to the node of the template's newest build).
func (g *Gateway) serveBuild(w http.ResponseWriter, r *http.Request, templateID, buildID string) {
	id, err := g.store.BuildNode(r.Context(), buildID)
	if errors.Is(err, cluster.ErrNotFound) {
		id, err = g.store.TemplateBuildNode(r.Context(), templateID)
	}
	if errors.Is(err, cluster.ErrNotFound) {
		writeError(w, r, http.StatusNotFound, fmt.Sprintf("template build %q not found", buildID))
		return
	}
	if err != nil {
		writeError(w, r, http.StatusServiceUnavailable, storeError(err).msg)
		return
	}
	g.serveOn(w, r, id, fmt.Sprintf("build %s", buildID), nil)
}

// templateBuildNode answers 404 or 503 itself when a template has no build
// node.
func (g *Gateway) templateBuildNode(w http.ResponseWriter, r *http.Request, templateID string) (string, bool) {
	id, err := g.store.TemplateBuildNode(r.Context(), templateID)
	if errors.Is(err, cluster.ErrNotFound) {
		writeError(w, r, http.StatusNotFound, fmt.Sprintf("template %q has no build", templateID))
		return "", false
	}
	if err != nil {
		writeError(w, r, http.StatusServiceUnavailable, storeError(err).msg)
		return "", false
	}
	return id, true
}

// serveUploadLink forwards GET /templates/{id}/files/{hash} to the
// template's build node, and adds the template to the upload URL it
// answers so that the upload finds the same node.
func (g *Gateway) serveUploadLink(w http.ResponseWriter, r *http.Request, templateID string) {
	id, ok := g.templateBuildNode(w, r, templateID)
	if !ok {
		return
	}
	g.serveOn(w, r, id, fmt.Sprintf("template %s's build", templateID), &attempt{edit: func(resp *http.Response) error {
		return addUploadTemplate(resp, templateID)
	}})
}

// addUploadTemplate adds the template parameter to the "url" of an upload
// link answer.
func addUploadTemplate(resp *http.Response, templateID string) error {
	// 201 as E2B answers; 200 from a node of an older release.
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("reading the upload link: %w", err)
	}
	var body map[string]any
	if json.Unmarshal(data, &body) == nil {
		if s, ok := body["url"].(string); ok {
			if u, err := url.Parse(s); err == nil {
				q := u.Query()
				q.Set(uploadTemplateParam, templateID)
				u.RawQuery = q.Encode()
				body["url"] = u.String()
				if b, err := json.Marshal(body); err == nil {
					data = append(b, '\n')
				}
			}
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	resp.ContentLength = int64(len(data))
	resp.Header.Set("Content-Length", strconv.Itoa(len(data)))
	return nil
}

// serveUpload forwards a template file upload to the build node of the
// template its URL names (else to any node).
func (g *Gateway) serveUpload(w http.ResponseWriter, r *http.Request) {
	t := r.URL.Query().Get(uploadTemplateParam)
	if t == "" {
		g.serveAnyNode(w, r)
		return
	}
	id, ok := g.templateBuildNode(w, r, t)
	if !ok {
		return
	}
	g.serveOn(w, r, id, fmt.Sprintf("template %s's build", t), nil)
}

// serveNewBuild forwards a new template build to the least loaded live
// node (a placement released at once: the build's sandboxes count in the
// node's heartbeats).
func (g *Gateway) serveNewBuild(w http.ResponseWriter, r *http.Request) {
	// A rebuild goes where the template is: that node has its layer cache.
	if name := buildName(w, r); name != "" {
		for _, n := range g.nodesIn(cluster.StateLive) {
			if holdsName(n, name) {
				g.forward(w, r, n, false)
				return
			}
		}
	}
	res, err := g.placer.Place(placement.Request{Resources: placement.Resources{CPUCount: defaultCPUs, MemoryMB: defaultMemoryMB}})
	if err != nil {
		placementError(w, r, err)
		return
	}
	res.Release()
	g.serveOn(w, r, res.NodeID(), "the build", nil)
}

// serveAnyNode forwards r to one live node: the lowest id, then the next
// ones while they cannot be reached (when r has no body to resend).
func (g *Gateway) serveAnyNode(w http.ResponseWriter, r *http.Request) {
	nodes := g.nodesIn(cluster.StateLive)
	if len(nodes) == 0 {
		writeError(w, r, http.StatusServiceUnavailable, "no live node in the cluster")
		return
	}
	resend := r.ContentLength == 0
	for i, n := range nodes {
		retry := resend && i < len(nodes)-1
		a := g.forward(w, r, n, retry)
		if a.err == nil || !retry || r.Context().Err() != nil {
			return
		}
		g.log.Warn("node unreachable; trying the next", "node", n.ID, "addr", n.Addr, "err", a.err)
	}
}

// placementError answers a failed placement: 503 with the refusal.
func placementError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, placement.ErrNoCapacity) {
		writeError(w, r, http.StatusServiceUnavailable, err.Error())
		return
	}
	if errors.Is(err, placement.ErrInvalidRequest) {
		writeError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	writeError(w, r, http.StatusInternalServerError, err.Error())
}

// serveTemplate forwards a request about one template (info, aliases,
// tags, delete) to a live node that holds it, else to the node of its
// newest build, else to any node (which answers 404 for an unknown one).
// Nodes list only the templates on their disk, so any node would not do.
func (g *Gateway) serveTemplate(w http.ResponseWriter, r *http.Request, templateID string) {
	// A snapshot is a template too (GET and DELETE /templates/{snapshotID}):
	// its node, when no node holds a template of that name.
	if !g.anyNodeHolds(templateID) {
		if id, err := g.store.SnapshotNode(r.Context(), templateID); err == nil {
			g.serveOn(w, r, id, "snapshot "+templateID, nil)
			return
		}
	}
	name, _, _ := strings.Cut(templateID, ":")
	nodes := g.nodesIn(cluster.StateLive, cluster.StateDraining)
	for _, n := range nodes { // the exact tag first
		if slices.Contains(n.Templates, templateID) {
			g.forward(w, r, n, false)
			return
		}
	}
	for _, n := range nodes {
		if holdsName(n, name) {
			g.forward(w, r, n, false)
			return
		}
	}
	if n, ok := g.freshBuildNode(r, templateID); ok {
		g.forward(w, r, n, false)
		return
	}
	g.serveAnyNode(w, r)
}

// listTemplates merges every node's template list: a template held by
// several nodes (the defaults are on all) is listed once.
func (g *Gateway) listTemplates(w http.ResponseWriter, r *http.Request) {
	its, _, ok := g.gather(w, r, "createdAt", "templateID", false)
	if !ok {
		return
	}
	slices.SortFunc(its, compareItems)
	writeJSON(w, r, http.StatusOK, raws(its))
}

// serveTags forwards POST and DELETE /templates/tags (the template is named
// in the body: target "name:tag", or name) to a node holding the template:
// a node resolves the tagged build from its own disk.
func (g *Gateway) serveTags(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCreateBody))
	if err != nil {
		writeError(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("reading the request body: %v", err))
		return
	}
	var req struct{ Target, Name string }
	_ = json.Unmarshal(body, &req) // a bad body: the node answers 400
	tpl := req.Target
	if tpl == "" {
		tpl = req.Name
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	if tpl == "" {
		g.serveAnyNode(w, r)
		return
	}
	g.serveTemplate(w, r, tpl)
}

// buildName is the template a new build is for: /airlock/v1/templates/{name}/build
// names it in the path, POST /v3/templates in its body ("name", or the
// older "alias"; "name:tag" counts as name). The body is put back.
func buildName(w http.ResponseWriter, r *http.Request) string {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/airlock/v1/templates/"); ok {
		name, _, _ := strings.Cut(rest, "/")
		return name
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCreateBody))
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	if err != nil {
		return ""
	}
	var req struct{ Name, Alias string }
	_ = json.Unmarshal(body, &req)
	name := req.Name
	if name == "" {
		name = req.Alias
	}
	name, _, _ = strings.Cut(name, ":")
	return name
}

// holdsName reports whether n holds a template called name, with any tag.
func holdsName(n cluster.Node, name string) bool {
	for _, t := range n.Templates {
		if t == name || strings.HasPrefix(t, name+":") {
			return true
		}
	}
	return false
}
