package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/placement"
)

// Moving paused sandboxes to other nodes (their images are in the artifact
// store; the node side is internal/sandbox/move.go). A request for a
// sandbox whose node is draining, lost or gone from the registry moves it
// first when it is paused and movable: a live node is placed, asked to
// adopt it (it claims the row, so of two api instances moving one sandbox
// one wins), and the request goes there. A drain moves every sandbox of
// the node: the node pauses its running ones into the store (evacuate),
// then each is adopted and resumed elsewhere.

// Bounds of the calls to the node API.
const (
	adoptTimeout    = 15 * time.Second
	resumeTimeout   = 3 * time.Minute
	evacuateTimeout = 10 * time.Minute
)

// callNode posts body (JSON) to node n's internal API at path
// (cluster.InternalPrefix + path) and decodes a 200 answer into out; any
// other answer is a *routeError with the node's status and message.
func (g *Gateway) callNode(ctx context.Context, n cluster.Node, path string, body, out any) *routeError {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+n.Addr+cluster.InternalPrefix+path, bytes.NewReader(b))
	if err != nil {
		return &routeError{status: http.StatusInternalServerError, msg: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(cluster.HeaderSecret, g.opts.Secret)
	req.Header.Set(cluster.HeaderInternal, "1")
	resp, err := g.client.Do(req)
	if err != nil {
		return &routeError{status: http.StatusBadGateway, msg: unreachable(n, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return &routeError{status: http.StatusBadGateway, msg: unreachable(n, err)}
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &e)
		if e.Message == "" {
			e.Message = fmt.Sprintf("node %s answered %d", n.ID, resp.StatusCode)
		}
		return &routeError{status: resp.StatusCode, msg: e.Message}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return &routeError{status: http.StatusBadGateway, msg: fmt.Sprintf("node %s: decoding its answer: %v", n.ID, err)}
		}
	}
	return nil
}

// moveAttempts is how many nodes a move tries.
const moveAttempts = 3

// move hands the paused, movable sandbox rt describes to another live
// node (resumed there when resume is set, with timeoutMs) and returns
// that node. When another api instance moved it meanwhile (the node's
// claim fails with 409), the sandbox's new live node is returned.
func (g *Gateway) move(ctx context.Context, id string, rt cluster.Route, resume bool, timeoutMs int64) (cluster.Node, cluster.SandboxMoved, *routeError) {
	preq := placement.Request{Template: rt.TemplateID, TemplateRequired: !g.opts.PullTemplates,
		Resources: placement.Resources{CPUCount: max(rt.CPUCount, 1), MemoryMB: int64(max(rt.MemoryMB, 1))},
		Exclude:   []string{rt.NodeID}}
	var last *routeError
	for range moveAttempts {
		res, err := g.placer.Place(preq)
		if err != nil {
			return cluster.Node{}, cluster.SandboxMoved{}, &routeError{status: http.StatusServiceUnavailable,
				msg: fmt.Sprintf("sandbox %s is paused on node %s, which cannot serve it, and no other node can take it: %v", id, rt.NodeID, err)}
		}
		res.Release() // a paused sandbox holds nothing; its resume is the node's to admit
		n, ok := g.lookupNode(ctx, res.NodeID())
		if !ok {
			preq.Exclude = append(slices.Clip(preq.Exclude), res.NodeID())
			continue
		}
		timeout := adoptTimeout
		if resume {
			timeout = resumeTimeout
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		var got cluster.SandboxMoved
		rerr := g.callNode(cctx, n, "sandboxes/"+id+"/adopt", cluster.AdoptRequest{From: rt.NodeID, Resume: resume, TimeoutMs: timeoutMs}, &got)
		cancel()
		g.routes.drop(id)
		if rerr == nil {
			g.log.Info("sandbox moved", "sandbox", id, "from", rt.NodeID, "to", n.ID, "state", got.State)
			return n, got, nil
		}
		if rerr.status == http.StatusConflict || rerr.status == http.StatusNotFound {
			// Claimed by someone else meanwhile (or resumed, or killed).
			now, err := g.store.SandboxRoute(ctx, id)
			if err == nil && now.NodeID != rt.NodeID {
				if m, ok := g.lookupNode(ctx, now.NodeID); ok && effectiveState(m) == cluster.StateLive {
					return m, cluster.SandboxMoved{SandboxID: id, Node: m.ID, State: now.State}, nil
				}
			}
			if now.NodeID == n.ID { // this node took it, and its resume failed
				return cluster.Node{}, cluster.SandboxMoved{}, rerr
			}
		}
		g.log.Warn("moving a sandbox: the node refused", "sandbox", id, "from", rt.NodeID, "to", n.ID, "status", rerr.status, "err", rerr.msg)
		last = rerr
		preq.Exclude = append(slices.Clip(preq.Exclude), n.ID)
	}
	if last == nil {
		last = &routeError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf("sandbox %s: no node could take it", id)}
	}
	return cluster.Node{}, cluster.SandboxMoved{}, last
}

// ownerOrMove is owner, except that a paused, movable sandbox whose node
// is draining, lost or gone is moved to a live node first (and a failed
// move of one whose node is draining leaves it there).
func (g *Gateway) ownerOrMove(ctx context.Context, id string) (cluster.Node, *routeError) {
	n, rerr := g.owner(ctx, id)
	if rerr == nil && effectiveState(n) == cluster.StateLive {
		return n, nil
	}
	if rerr != nil && !rerr.nodeGone {
		return n, rerr
	}
	rt, err := g.store.SandboxRoute(ctx, id)
	if err != nil || !rt.Movable {
		return n, rerr
	}
	moved, _, merr := g.move(ctx, id, rt, false, 0)
	if merr != nil {
		if rerr == nil { // draining: it still serves it
			return n, nil
		}
		return cluster.Node{}, merr
	}
	return moved, nil
}

// forwardOwned forwards r to n, the node of sandbox id. When n cannot be
// reached (a node that crashed and is not marked lost yet) and the
// sandbox is paused with its image in the artifact store, it is moved to
// a live node and r goes there: nobody waits for the loss bound.
func (g *Gateway) forwardOwned(w http.ResponseWriter, r *http.Request, id string, n cluster.Node) {
	a := g.forward(w, r, n, true)
	if a.responded || a.err == nil || r.Context().Err() != nil {
		return
	}
	if notSent(a.err) {
		if rt, err := g.store.SandboxRoute(r.Context(), id); err == nil && rt.Movable && rt.NodeID == n.ID {
			if to, _, merr := g.move(r.Context(), id, rt, false, 0); merr == nil {
				g.forward(w, r, to, false)
				return
			}
		}
	}
	g.log.Warn("forwarding to a node failed", "node", n.ID, "addr", n.Addr, "method", r.Method, "path", r.URL.Path, "err", a.err)
	writeError(w, r, http.StatusBadGateway, unreachable(n, a.err))
}

// drain moves every sandbox off node id (setNodeState made it draining):
// the node pauses its running sandboxes into the artifact store, then each
// is adopted by another node, and resumed there if it was running.
func (g *Gateway) drain(ctx context.Context, id string) cluster.DrainResponse {
	out := cluster.DrainResponse{ID: id, State: cluster.StateDraining, Moved: []cluster.SandboxMoved{}, Failed: []cluster.SandboxMoved{}}
	n, ok := g.lookupNode(ctx, id)
	if !ok {
		return out
	}
	ectx, cancel := context.WithTimeout(ctx, evacuateTimeout)
	defer cancel()
	var ev cluster.EvacuateResponse
	if rerr := g.callNode(ectx, n, "evacuate", nil, &ev); rerr != nil {
		out.Failed = append(out.Failed, cluster.SandboxMoved{Node: id, Error: "evacuating the node: " + rerr.msg})
		return out
	}
	for _, s := range ev.Sandboxes {
		if s.Error != "" {
			out.Failed = append(out.Failed, s)
			continue
		}
		rt, err := g.store.SandboxRoute(ctx, s.SandboxID)
		if err != nil {
			s.Error = fmt.Sprintf("reading its route: %v", err)
			out.Failed = append(out.Failed, s)
			continue
		}
		if rt.NodeID != id || !rt.Movable {
			continue // killed, resumed or moved meanwhile
		}
		resume := s.Was == "running"
		to, got, rerr := g.move(ctx, s.SandboxID, rt, resume, s.LeftMs)
		if rerr != nil {
			s.Error = rerr.msg
			out.Failed = append(out.Failed, s)
			continue
		}
		out.Moved = append(out.Moved, cluster.SandboxMoved{SandboxID: s.SandboxID, Node: to.ID, State: got.State, Was: s.Was})
	}
	g.log.Info("node drained", "node", id, "moved", len(out.Moved), "failed", len(out.Failed))
	return out
}

// refuseInternal answers a client's request for the nodes' internal API.
func refuseInternal(w http.ResponseWriter) {
	middleware.WriteError(w, http.StatusNotFound, "not found")
}
