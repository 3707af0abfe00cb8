package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/wire"
	"github.com/airlock-sandbox/airlock/internal/middleware"
)

// routeError is why a request for a sandbox cannot be routed.
type routeError struct {
	status int
	msg    string
	// gone: the sandbox is unknown or was lost (404 on the API, the
	// proxy's 502 "not found" body on sandbox traffic).
	gone bool
	// nodeGone: its node is lost or not registered (a paused sandbox whose
	// image is in the artifact store can move: ownerOrMove).
	nodeGone bool
}

func (e *routeError) Error() string { return e.msg }

// owner finds the node of a sandbox. A sandbox that is not in the store,
// or that was lost with its node, is a gone *routeError saying so.
func (g *Gateway) owner(ctx context.Context, id string) (cluster.Node, *routeError) {
	if g.unknown.has(id, time.Now()) {
		return cluster.Node{}, &routeError{status: http.StatusNotFound, gone: true, msg: fmt.Sprintf("sandbox %q not found", id)}
	}
	nodeID, err := g.sandboxNode(ctx, id)
	if errors.Is(err, cluster.ErrNotFound) {
		l, lerr := g.store.LostSandbox(ctx, id)
		if lerr == nil {
			return cluster.Node{}, &routeError{status: http.StatusNotFound, gone: true,
				msg: fmt.Sprintf("sandbox %s was lost with node %s at %s: %s", id, l.NodeID, l.At.UTC().Format(time.RFC3339), l.Reason)}
		}
		if !errors.Is(lerr, cluster.ErrNotFound) {
			return cluster.Node{}, storeError(lerr)
		}
		g.unknown.add(id, time.Now())
		return cluster.Node{}, &routeError{status: http.StatusNotFound, gone: true, msg: fmt.Sprintf("sandbox %q not found", id)}
	}
	if err != nil {
		return cluster.Node{}, storeError(err)
	}
	n, ok := g.lookupNode(ctx, nodeID)
	if !ok {
		return cluster.Node{}, &routeError{status: http.StatusBadGateway, nodeGone: true, msg: fmt.Sprintf("node %s of sandbox %s is not registered", nodeID, id)}
	}
	if effectiveState(n) == cluster.StateLost {
		at := n.LostAt
		if at.IsZero() {
			at = time.Now()
		}
		return cluster.Node{}, &routeError{status: http.StatusNotFound, gone: true, nodeGone: true,
			msg: fmt.Sprintf("sandbox %s was lost with node %s at %s: node %s was lost: no heartbeat for %s",
				id, n.ID, at.UTC().Format(time.RFC3339), n.ID, n.Age.Round(time.Second))}
	}
	return n, nil
}

// storeError is the answer when the cluster store cannot be read.
func storeError(err error) *routeError {
	return &routeError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf("the cluster store cannot be read: %v", err)}
}

// serveSandboxTraffic forwards sandbox traffic (an E2b-Sandbox-Id header,
// a <port>-<id>.<domain> Host that is no API host, a header-less signed
// /files URL) to the sandbox's node, which checks its tokens. It reports
// whether r was sandbox traffic.
func (g *Gateway) serveSandboxTraffic(w http.ResponseWriter, r *http.Request) bool {
	if id := r.Header.Get(wire.HeaderSandboxID); id != "" {
		g.serveTraffic(w, r, id)
		return true
	}
	if !g.isAPIHost(r.Host) {
		if _, id, ok := wire.ParseSandboxHost(r.Host); ok {
			g.serveTraffic(w, r, id)
			return true
		}
	}
	if r.URL.Path == "/files" && g.opts.VerifySignature != nil && r.URL.Query().Get("signature") != "" {
		g.serveSigned(w, r)
		return true
	}
	return false
}

func (g *Gateway) serveTraffic(w http.ResponseWriter, r *http.Request, id string) {
	if wire.ValidID(id) != nil {
		http.Error(w, "invalid sandbox id", http.StatusBadRequest)
		return
	}
	if !g.cheapRoute(id) && !g.routed.has(id, time.Now()) && !g.allowUnauth(w, r, "routing sandbox "+id) {
		return
	}
	n, rerr := g.ownerOrMove(r.Context(), id)
	if rerr != nil {
		trafficError(w, r, id, rerr)
		return
	}
	// Routed: its traffic is not limited for a while even when the route
	// cache is off (a broken watch), which would otherwise throttle every
	// sandbox behind one balancer.
	g.routed.add(id, time.Now())
	g.forwardOwned(w, r, id, n)
}

// cheapRoute reports whether sandbox traffic for id costs nothing to
// route: its route is cached and its node is live (no store read, no
// move), or it is an id the store did not know a moment ago (a cached
// 404). Other sandbox traffic without the API key takes from the client's
// rate limit (allowUnauth): an id that is not cached costs store reads, and
// one of a paused sandbox on a draining, lost or gone node a move and a
// resume (E2B's autoResume, kept: within the limit it happens as before).
func (g *Gateway) cheapRoute(id string) bool {
	if g.unknown.has(id, time.Now()) {
		return true
	}
	nodeID, ok := g.routes.get(id)
	if !ok {
		return false
	}
	n, ok := g.node(nodeID)
	return ok && effectiveState(n) == cluster.StateLive
}

// trafficError answers sandbox traffic that cannot be routed; a gone
// sandbox gets the body of the node's proxy (502, sandboxId).
func trafficError(w http.ResponseWriter, r *http.Request, id string, e *routeError) {
	if !e.gone {
		writeError(w, r, e.status, e.msg)
		return
	}
	msg := "The sandbox was not found or is not reachable on this port"
	if strings.Contains(e.msg, " was lost ") {
		msg = e.msg
	}
	middleware.WriteJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": msg, "code": http.StatusBadGateway})
}

// serveSigned routes a header-less signed /files request to the node of the
// sandbox whose access token verifies the signature (the node's proxy
// verifies it again). Nobody is authenticated yet, so it first refuses a
// signature not shaped like one (400, nothing read), then takes from the
// client's rate limit, then looks the token up in the api tier's copy
// (tokenIndex: at most one store read a second, never one per request).
func (g *Gateway) serveSigned(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !signatureShape.MatchString(q.Get("signature")) {
		writeError(w, r, http.StatusBadRequest, `invalid signature: want "v1_" and 43 base64 characters`)
		return
	}
	if !g.allowUnauth(w, r, "signed /files lookup") {
		return
	}
	op := "read"
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		op = "write"
	}
	now := time.Now()
	expired := false
	t, ok, err := g.tokens.find(r.Context(), g.store.SandboxTokens, func(token string) bool {
		err := g.opts.VerifySignature(q, op, token, now)
		if err != nil && strings.Contains(strings.ToLower(err.Error()), "expired") {
			expired = true
		}
		return err == nil
	})
	if err != nil {
		if r.Context().Err() == nil {
			writeError(w, r, http.StatusServiceUnavailable, storeError(err).msg)
		}
		return
	}
	if !ok {
		msg := "invalid signature: no sandbox matches"
		if expired {
			msg = "signature is already expired"
		}
		writeError(w, r, http.StatusUnauthorized, msg)
		return
	}
	n, rerr := g.owner(r.Context(), t.SandboxID)
	if rerr != nil {
		trafficError(w, r, t.SandboxID, rerr)
		return
	}
	g.forward(w, r, n, false)
}

// serveOwned forwards an API request about one sandbox to its node.
func (g *Gateway) serveOwned(w http.ResponseWriter, r *http.Request, id string) {
	if i := strings.IndexByte(id, '-'); i >= 0 { // "<id>-<clientID>"
		id = id[:i]
	}
	if !wire.IDChars(id) {
		writeError(w, r, http.StatusNotFound, fmt.Sprintf("sandbox %q not found", id))
		return
	}
	if r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/connect") || strings.HasSuffix(r.URL.Path, "/resume")) {
		// A resume reads the route: the sandbox, running on a draining
		// node a moment ago, may be paused now and movable.
		g.stay.del(id)
	}
	_, cached := g.routes.get(id)
	n, rerr := g.ownerOrMove(r.Context(), id)
	if rerr != nil {
		writeError(w, r, rerr.status, rerr.msg)
		return
	}
	var replay *replayBody
	if cached {
		replay = bufferBody(r)
	}
	g.forwardOwnedReplay(w, r, id, n, replay)
}

// itoa is strconv.Itoa, for headers.
func itoa(n int) string { return strconv.Itoa(n) }
