package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
	"github.com/airlock-sandbox/airlock/internal/cluster/placement"
	"github.com/airlock-sandbox/airlock/internal/middleware"
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
	// drainMoves is how many sandboxes a drain moves at a time.
	drainMoves = 4
)

// callNode posts body (JSON) to node n's internal API at path
// (cluster.InternalPrefix + path) and decodes a 200 answer into out; any
// other answer is a *routeError with the node's status and message.
func (g *Gateway) callNode(ctx context.Context, n cluster.Node, path string, body, out any) *routeError {
	_, rerr := g.callNodeGen(ctx, n, path, body, out)
	return rerr
}

// callNodeGen is callNode, also returning the answer's cluster.HeaderGen.
func (g *Gateway) callNodeGen(ctx context.Context, n cluster.Node, path string, body, out any) (uint64, *routeError) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(clustertls.WithNode(ctx, n.ID), http.MethodPost, "https://"+n.Addr+cluster.InternalPrefix+path, bytes.NewReader(b))
	if err != nil {
		return 0, &routeError{status: http.StatusInternalServerError, msg: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(cluster.HeaderSecret, g.opts.Secret)
	req.Header.Set(cluster.HeaderInternal, "1")
	resp, err := g.client.Do(req)
	if err != nil {
		return 0, &routeError{status: http.StatusBadGateway, msg: unreachable(n, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, &routeError{status: http.StatusBadGateway, msg: unreachable(n, err)}
	}
	gen, _ := strconv.ParseUint(resp.Header.Get(cluster.HeaderGen), 10, 64)
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &e)
		if e.Message == "" {
			e.Message = fmt.Sprintf("node %s answered %d", n.ID, resp.StatusCode)
		}
		return gen, &routeError{status: resp.StatusCode, msg: e.Message}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return gen, &routeError{status: http.StatusBadGateway, msg: fmt.Sprintf("node %s: decoding its answer: %v", n.ID, err)}
		}
	}
	return gen, nil
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
	if rt.Volumes { // its volumes are on the shared root (volumes.go)
		preq.Labels = []string{cluster.LabelVolumes}
	}
	var last *routeError
	for range moveAttempts {
		res, err := g.placer.Place(preq)
		if err != nil {
			return cluster.Node{}, cluster.SandboxMoved{}, &routeError{status: http.StatusServiceUnavailable,
				msg: fmt.Sprintf("sandbox %s is paused on node %s, which cannot serve it, and no other node can take it: %v", id, rt.NodeID, err)}
		}
		if !resume {
			res.Release() // a paused sandbox holds nothing
		}
		n, ok := g.lookupNode(ctx, res.NodeID())
		if !ok {
			res.Release()
			preq.Exclude = append(slices.Clip(preq.Exclude), res.NodeID())
			continue
		}
		timeout := adoptTimeout
		if resume {
			timeout = resumeTimeout
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		var got cluster.SandboxMoved
		gen, rerr := g.callNodeGen(cctx, n, "sandboxes/"+id+"/adopt", cluster.AdoptRequest{From: rt.NodeID, Resume: resume, TimeoutMs: timeoutMs}, &got)
		cancel()
		g.routes.drop(id)
		if rerr == nil && resume {
			res.Confirm(gen) // it runs there now: counted until a heartbeat does
		} else {
			res.Release()
		}
		if rerr == nil {
			g.log.Info("sandbox moved", "sandbox", id, "from", rt.NodeID, "to", n.ID, "state", got.State)
			g.tellDropped(id, rt.NodeID)
			return n, got, nil
		}
		// Where is it now? Still on rt.NodeID: n refused it (e.g. it lacks the
		// runtime build): try another node. On n: n took it and then failed
		// (its resume): that is the answer. Elsewhere: another api instance
		// moved it meanwhile: there it is.
		now, err := g.store.SandboxRoute(ctx, id)
		switch {
		case err != nil && !errors.Is(err, cluster.ErrNotFound):
			return cluster.Node{}, cluster.SandboxMoved{}, storeError(err)
		case err != nil: // killed meanwhile
			return cluster.Node{}, cluster.SandboxMoved{}, rerr
		case now.NodeID == n.ID:
			return cluster.Node{}, cluster.SandboxMoved{}, rerr
		case now.NodeID != rt.NodeID:
			if m, ok := g.lookupNode(ctx, now.NodeID); ok && effectiveState(m) == cluster.StateLive {
				return m, cluster.SandboxMoved{SandboxID: id, Node: m.ID, State: now.State}, nil
			}
			return cluster.Node{}, cluster.SandboxMoved{}, rerr
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

// tellDropped tells node from, when it can be reached, that sandbox id
// moved away, so that it stops listing it now rather than at its next
// look (node.DropMoved). Best effort, in the background.
func (g *Gateway) tellDropped(id, from string) {
	n, ok := g.node(from)
	if !ok || effectiveState(n) == cluster.StateLost {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), adoptTimeout)
		defer cancel()
		if rerr := g.callNode(ctx, n, "sandboxes/"+id+"/drop", nil, nil); rerr != nil {
			g.log.Debug("telling a node a sandbox moved away", "node", from, "sandbox", id, "err", rerr.msg)
		}
	}()
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
	if rerr == nil && g.stay.has(id, time.Now()) {
		return n, nil
	}
	rt, err := g.store.SandboxRoute(ctx, id)
	if err == nil && rt.Uploading {
		if rerr != nil {
			return cluster.Node{}, uploadingError(id, rt.NodeID, "is lost")
		}
		// A draining node: wait there for the upload, then move it.
		if rt, err = g.awaitUpload(ctx, n, id); err != nil {
			g.log.Warn("waiting for a paused sandbox's upload before a move; its node serves it", "sandbox", id, "node", n.ID, "err", err)
			return n, nil
		}
	}
	if err != nil || !rt.Movable {
		if err == nil && rerr == nil {
			// A running sandbox of a draining node: not asked again for
			// a while (a node can stay draining long; its traffic must not
			// read the database on every request).
			g.stay.add(id, time.Now())
		}
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
	g.forwardOwnedReplay(w, r, id, n, nil)
}

// forwardOwnedReplay is forwardOwned; with replay (r's route came from the
// route cache and its body is buffered in replay) a 404 from n sends r
// once more to the node the store names now (staleroute.go).
func (g *Gateway) forwardOwnedReplay(w http.ResponseWriter, r *http.Request, id string, n cluster.Node, replay *replayBody) {
	if replay != nil {
		replay.rewind(r)
	}
	a := g.forwardAttempt(w, r, &attempt{node: n, retry: true, holdNotFound: replay != nil})
	if a.notFound != nil {
		g.notHeld(w, r, id, n, a.notFound, replay)
		return
	}
	if a.responded || a.err == nil || r.Context().Err() != nil {
		return
	}
	if notSent(a.err) {
		if rt, err := g.store.SandboxRoute(r.Context(), id); err == nil && rt.Movable && rt.NodeID == n.ID {
			if to, _, merr := g.move(r.Context(), id, rt, false, 0); merr == nil {
				g.forward(w, r, to, false)
				return
			}
		} else if err == nil && rt.Uploading && rt.NodeID == n.ID {
			g.log.Warn("forwarding to a node failed; its paused sandbox is not in the artifact store yet", "node", n.ID, "sandbox", id, "err", a.err)
			ue := uploadingError(id, n.ID, "cannot be reached")
			writeError(w, r, ue.status, ue.msg)
			return
		}
	}
	g.log.Warn("forwarding to a node failed", "node", n.ID, "addr", n.Addr, "method", r.Method, "path", r.URL.Path, "err", a.err)
	writeError(w, r, http.StatusBadGateway, unreachable(n, a.err))
}

// uploadWait bounds how long a move waits for the upload of a paused
// sandbox's image on its (draining) node.
const uploadWait = time.Minute

// awaitUpload asks node n to wait (bounded by uploadWait) until the image
// of its paused sandbox id is in the artifact store, and returns the
// sandbox's route then.
func (g *Gateway) awaitUpload(ctx context.Context, n cluster.Node, id string) (cluster.Route, error) {
	cctx, cancel := context.WithTimeout(ctx, uploadWait+5*time.Second)
	defer cancel()
	start := time.Now()
	if rerr := g.callNode(cctx, n, "sandboxes/"+id+"/uploaded", nil, nil); rerr != nil {
		return cluster.Route{}, rerr
	}
	rt, err := g.store.SandboxRoute(ctx, id)
	if err != nil {
		return rt, err
	}
	g.log.Info("waited for a paused sandbox's upload before moving it", "sandbox", id, "node", n.ID, "waited", time.Since(start), "movable", rt.Movable)
	return rt, nil
}

// uploadingError is the answer for a paused sandbox whose node cannot
// serve it (it is lost, or cannot be reached) before the upload of its
// image to the artifact store finished: nothing is lost (its checkpoint is
// durable on that node, which finishes the upload when it is back), but
// no other node can resume it until then.
func uploadingError(id, node, what string) *routeError {
	return &routeError{status: http.StatusServiceUnavailable,
		msg: fmt.Sprintf("sandbox %s is paused on node %s, which %s, and its image was still being uploaded to the artifact store: "+
			"no other node can resume it yet; its checkpoint is kept on node %s, which finishes the upload when it is back", id, node, what, node)}
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
	// Not cut short by a client that goes away: half a drain helps no one.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), evacuateTimeout+10*time.Minute)
	defer cancel()
	ectx, ecancel := context.WithTimeout(ctx, evacuateTimeout)
	defer ecancel()
	var ev cluster.EvacuateResponse
	if rerr := g.callNode(ectx, n, "evacuate", nil, &ev); rerr != nil {
		out.Failed = append(out.Failed, cluster.SandboxMoved{Node: id, Error: "evacuating the node: " + rerr.msg})
		return out
	}
	// Moved drainMoves at a time: each is mostly waiting (a fetch from the
	// store, a restore on another node).
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, drainMoves)
	)
	record := func(moved bool, m cluster.SandboxMoved) {
		mu.Lock()
		defer mu.Unlock()
		if moved {
			out.Moved = append(out.Moved, m)
		} else {
			out.Failed = append(out.Failed, m)
		}
	}
	for _, s := range ev.Sandboxes {
		if s.Error != "" {
			record(false, s)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			rt, err := g.store.SandboxRoute(ctx, s.SandboxID)
			if errors.Is(err, cluster.ErrNotFound) {
				return // killed meanwhile, or a stale copy of one gone from the node
			}
			if err != nil {
				s.Error = fmt.Sprintf("reading its route: %v", err)
				record(false, s)
				return
			}
			if rt.NodeID != id || !rt.Movable {
				return // killed, resumed or moved meanwhile
			}
			to, got, rerr := g.move(ctx, s.SandboxID, rt, s.Was == "running", s.LeftMs)
			if rerr != nil {
				s.Error = rerr.msg
				record(false, s)
				return
			}
			record(true, cluster.SandboxMoved{SandboxID: s.SandboxID, Node: to.ID, State: got.State, Was: s.Was})
		}()
	}
	wg.Wait()
	slices.SortFunc(out.Moved, func(a, b cluster.SandboxMoved) int { return strings.Compare(a.SandboxID, b.SandboxID) })
	slices.SortFunc(out.Failed, func(a, b cluster.SandboxMoved) int { return strings.Compare(a.SandboxID, b.SandboxID) })
	g.log.Info("node drained", "node", id, "moved", len(out.Moved), "failed", len(out.Failed))
	return out
}

// refuseInternal answers a client's request for the nodes' internal API.
func refuseInternal(w http.ResponseWriter) {
	middleware.WriteError(w, http.StatusNotFound, "not found")
}
