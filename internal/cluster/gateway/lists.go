package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster/wire"
)

// List limits (the contract's).
const (
	defaultListLimit = wire.DefaultListLimit
	maxListLimit     = wire.MaxListLimit
)

// listItem is one element of a node's list, with the fields it is ordered
// by.
type listItem struct {
	raw json.RawMessage
	at  time.Time
	id  string
}

// NodeField is the Airlock extension field the api tier adds to each
// sandbox of a merged list (GET /sandboxes, GET /v2/sandboxes): the id of
// the node that listed it. E2B's SDKs ignore fields they do not know.
const NodeField = "clusterNode"

// items decodes the JSON arrays of the answers; at and id name the fields
// of the order. An element seen twice (a sandbox that moved, still listed
// by the node it left until that node drops it) is kept once: the copy of
// the node owner names (owner, when set, is asked only about such ids),
// else the first. With tag, each element gets NodeField naming the node
// that answered it (unless it has that field already).
func items(answers []nodeAnswer, at, id string, tag bool, owner func(id string) (string, bool)) ([]listItem, error) {
	var out []listItem
	seen := map[string]int{} // id → index in out
	for _, a := range answers {
		var raws []json.RawMessage
		if err := json.Unmarshal(a.body, &raws); err != nil {
			return nil, fmt.Errorf("node %s: decoding its list: %w", a.node.ID, err)
		}
		for _, raw := range raws {
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(raw, &fields); err != nil {
				return nil, fmt.Errorf("node %s: decoding a list item: %w", a.node.ID, err)
			}
			if _, has := fields[NodeField]; tag && !has {
				raw = withField(raw, NodeField, a.node.ID)
			}
			it := listItem{raw: raw}
			_ = json.Unmarshal(fields[at], &it.at)
			_ = json.Unmarshal(fields[id], &it.id)
			if i, dup := seen[it.id]; it.id != "" && dup {
				if owner != nil {
					if o, ok := owner(it.id); ok && o == a.node.ID {
						out[i] = it
					}
				}
				continue
			}
			seen[it.id] = len(out)
			out = append(out, it)
		}
	}
	return out, nil
}

// withField adds "name": value to raw, a JSON object, keeping the order
// and bytes of its other fields. raw is returned as is when it is not an
// object.
func withField(raw json.RawMessage, name, value string) json.RawMessage {
	obj := bytes.TrimSpace(raw)
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return raw
	}
	field, _ := json.Marshal(map[string]string{name: value}) // {"name":"value"}
	body := bytes.TrimSpace(obj[1 : len(obj)-1])
	out := make([]byte, 0, len(obj)+len(field))
	out = append(out, '{')
	if len(body) > 0 {
		out = append(out, body...)
		out = append(out, ',')
	}
	out = append(out, field[1:]...)
	return out
}

func compareItems(a, b listItem) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

func raws(its []listItem) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(its))
	for _, it := range its {
		out = append(out, it.raw)
	}
	return out
}

// listLimit is the query's limit (the nodes refused a bad one already).
func listLimit(r *http.Request) int {
	n, err := strconv.Atoi(r.URL.Query().Get("limit"))
	if err != nil || n < 1 || n > maxListLimit {
		return defaultListLimit
	}
	return n
}

// listV2 merges GET /v2/sandboxes. The cursor is positional (the startedAt
// and id of the previous page's last item), so every node is sent the same
// query and returns its first items past it; the union's first `limit`
// items, in order, are the page.
func (g *Gateway) listV2(w http.ResponseWriter, r *http.Request) {
	its, good, ok := g.gather(w, r, "startedAt", "sandboxID", true)
	if !ok {
		return
	}
	asc := r.URL.Query().Get("order") == "asc"
	slices.SortFunc(its, func(a, b listItem) int {
		if asc {
			return compareItems(a, b)
		}
		return compareItems(b, a)
	})
	running, more := 0, false
	for _, a := range good {
		n, _ := strconv.Atoi(a.header.Get("X-Total-Running"))
		running += n
		more = more || a.header.Get("X-Next-Token") != ""
	}
	if limit := listLimit(r); len(its) > limit {
		its, more = its[:limit], true
	}
	if more && len(its) > 0 {
		last := its[len(its)-1]
		w.Header().Set("X-Next-Token", wire.EncodeCursor(wire.Cursor{StartedAt: last.at, ID: last.id, Asc: asc}))
	}
	w.Header().Set("X-Total-Running", itoa(running))
	writeJSON(w, r, http.StatusOK, raws(its))
}

// listV1 merges GET /sandboxes (running sandboxes, newest first, no
// pagination).
func (g *Gateway) listV1(w http.ResponseWriter, r *http.Request) {
	its, _, ok := g.gather(w, r, "startedAt", "sandboxID", true)
	if !ok {
		return
	}
	slices.SortFunc(its, func(a, b listItem) int { return compareItems(b, a) })
	writeJSON(w, r, http.StatusOK, raws(its))
}

// listSnapshots merges GET /snapshots: oldest first, cut to the limit, its
// cursor the contract's (wire.EncodeSnapshotCursor).
func (g *Gateway) listSnapshots(w http.ResponseWriter, r *http.Request) {
	its, good, ok := g.gather(w, r, "createdAt", "snapshotID", false)
	if !ok {
		return
	}
	slices.SortFunc(its, compareItems)
	more := false
	for _, a := range good {
		more = more || a.header.Get("X-Next-Token") != ""
	}
	if limit := listLimit(r); len(its) > limit {
		its, more = its[:limit], true
	}
	if more && len(its) > 0 {
		last := its[len(its)-1]
		w.Header().Set("X-Next-Token", wire.EncodeSnapshotCursor(last.at, last.id))
	}
	writeJSON(w, r, http.StatusOK, raws(its))
}

// listMetrics merges GET /sandboxes/metrics: {"sandboxes": {id: metric}}.
func (g *Gateway) listMetrics(w http.ResponseWriter, r *http.Request) {
	good, ok := g.merged(w, r, g.fanOut(r))
	if !ok {
		return
	}
	all := map[string]json.RawMessage{}
	for _, a := range good {
		var body struct {
			Sandboxes map[string]json.RawMessage `json:"sandboxes"`
		}
		if err := json.Unmarshal(a.body, &body); err != nil {
			writeError(w, r, http.StatusBadGateway, fmt.Sprintf("node %s: decoding its metrics: %v", a.node.ID, err))
			return
		}
		for id, m := range body.Sandboxes {
			all[id] = m
		}
	}
	writeJSON(w, r, http.StatusOK, map[string]any{"sandboxes": all})
}

// gather fans r out to the nodes and decodes their lists (items); on a
// failure it has answered and ok is false.
func (g *Gateway) gather(w http.ResponseWriter, r *http.Request, at, id string, withNode bool) (its []listItem, good []nodeAnswer, ok bool) {
	good, ok = g.merged(w, r, g.fanOut(r))
	if !ok {
		return nil, nil, false
	}
	var owner func(string) (string, bool)
	if withNode { // sandboxes: a moved one is listed by its owner
		owner = func(id string) (string, bool) {
			n, err := g.sandboxNode(r.Context(), id)
			return n, err == nil
		}
	}
	its, err := items(good, at, id, withNode, owner)
	if err != nil {
		writeError(w, r, http.StatusBadGateway, err.Error())
		return nil, nil, false
	}
	return its, good, true
}
