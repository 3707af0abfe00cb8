package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
	"github.com/airlock-sandbox/airlock/internal/middleware"
)

// attempt is one forwarding of a request to a node, shared with the
// ReverseProxy's callbacks through the request's context.
type attempt struct {
	node cluster.Node
	// retry: on a transport error (no response), record it in err and
	// answer nothing, so that the caller can try another node.
	retry bool
	// edit, when set, may change the node's response (uploadlink.go).
	edit func(*http.Response) error

	err       error // the transport error, when there was no response
	responded bool
	status    int
	gen       uint64 // the response's cluster.HeaderGen
	// replaceFull (a create, with retry): a node's 503 "is full" (its
	// admission refused the create before taking anything) is not passed
	// on; full is set, err is errNodeFull and the caller places it again.
	replaceFull, full bool
	fullMsg           string // the node's refusal, when full
	// holdNotFound (a request routed by the route cache, whose body can be
	// sent again): a node's 404 is not passed on but kept in notFound, and
	// err is errNotHeld; the caller reads the route again, since the
	// sandbox may have moved a moment ago (staleroute.go).
	holdNotFound bool
	notFound     *heldResponse
}

// errNodeFull is an attempt's err when its node refused a create as full.
var errNodeFull = errors.New("the node is full")

type attemptKey struct{}

func attemptFrom(ctx context.Context) *attempt {
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	return a
}

// forwarder is the one ReverseProxy of every forwarded request.
type forwarder struct {
	g  *Gateway
	rp *httputil.ReverseProxy
}

func newForwarder(g *Gateway) *forwarder {
	f := &forwarder{g: g}
	f.rp = &httputil.ReverseProxy{
		Rewrite:        f.rewrite,
		Transport:      g.opts.Transport,
		FlushInterval:  -1, // streams (Connect, NDJSON, SSE) pass unbuffered
		ModifyResponse: f.modifyResponse,
		ErrorHandler:   f.errorHandler,
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	return f
}

// forward sends r to node n and copies its answer to w. When retry is set
// and the node could not be reached, nothing is written and the returned
// attempt's err says why.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, n cluster.Node, retry bool) *attempt {
	return g.forwardAttempt(w, r, &attempt{node: n, retry: retry})
}

func (g *Gateway) forwardAttempt(w http.ResponseWriter, r *http.Request, a *attempt) *attempt {
	clearCORS(w.Header()) // the node's answer carries its own
	// Sandbox traffic is full duplex (Connect streams, uploads answered
	// while their body is still read): without this, net/http closes the
	// request body once the first response bytes are flushed.
	_ = http.NewResponseController(w).EnableFullDuplex()
	g.fwd.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), attemptKey{}, a)))
	return a
}

// rewrite points the request at the node (over TLS, verified to be that
// node), keeping the client's Host (nodes route <port>-<id>.<domain> hosts
// by it), and puts the cluster secret in place of any the client sent.
func (f *forwarder) rewrite(pr *httputil.ProxyRequest) {
	a := attemptFrom(pr.In.Context())
	pr.Out = pr.Out.WithContext(clustertls.WithNode(pr.Out.Context(), a.node.ID))
	pr.SetURL(&url.URL{Scheme: "https", Host: a.node.Addr})
	pr.Out.Host = pr.In.Host
	pr.SetXForwarded()
	if p := pr.In.Header.Get("X-Forwarded-Proto"); p == "http" || p == "https" {
		pr.Out.Header.Set("X-Forwarded-Proto", p) // a TLS load balancer's
	}
	pr.Out.Header.Del(cluster.HeaderSecret)
	pr.Out.Header.Del(cluster.HeaderInternal)
	pr.Out.Header.Set(cluster.HeaderSecret, f.g.opts.Secret)
	markAuthenticated(pr.In, pr.Out.Header)
}

// keyCheckedKey marks a request context whose API key the gateway checked.
type keyCheckedKey struct{}

// markAuthenticated sets cluster.HeaderAuthenticated on a request to a
// node when the gateway checked in's API key, and removes any the client
// sent: a node trusts the header, so only the gateway may set it.
func markAuthenticated(in *http.Request, out http.Header) {
	out.Del(cluster.HeaderAuthenticated)
	if in.Context().Value(keyCheckedKey{}) != nil {
		out.Set(cluster.HeaderAuthenticated, "api-key")
	}
}

func (f *forwarder) modifyResponse(resp *http.Response) error {
	a := attemptFrom(resp.Request.Context())
	if a.holdNotFound && resp.StatusCode == http.StatusNotFound {
		a.notFound = holdResponse(resp)
		return errNotHeld
	}
	if a.replaceFull && resp.StatusCode == http.StatusServiceUnavailable {
		if msg, ok := nodeFull(resp); ok {
			a.full, a.fullMsg = true, msg
			return errNodeFull
		}
	}
	a.responded = true
	a.status = resp.StatusCode
	a.gen, _ = strconv.ParseUint(resp.Header.Get(cluster.HeaderGen), 10, 64)
	if resp.Header.Get(cluster.HeaderNode) == "" {
		resp.Header.Set(cluster.HeaderNode, a.node.ID)
	}
	if a.edit != nil {
		return a.edit(resp)
	}
	return nil
}

// nodeFull reports whether a node's 503 is its admission's refusal
// ("node n1 is full: …"), and returns its message; the body is read and
// put back.
func nodeFull(resp *http.Response) (string, bool) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	if err != nil {
		return "", false
	}
	var e struct {
		Message string `json:"message"`
	}
	ok := json.Unmarshal(b, &e) == nil && strings.HasPrefix(e.Message, "node ") && strings.Contains(e.Message, " is full")
	return e.Message, ok
}

func (f *forwarder) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	a := attemptFrom(r.Context())
	if !a.responded {
		a.err = err
	}
	if r.Context().Err() != nil {
		return // the client went away
	}
	if a.full || a.notFound != nil || (a.retry && !a.responded) {
		return // the caller tries another node, or says the cluster is full
	}
	f.g.log.Warn("forwarding to a node failed", "node", a.node.ID, "addr", a.node.Addr, "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, r, http.StatusBadGateway, unreachable(a.node, err))
}

// unreachable is the message of a 502 for a node that could not be reached.
func unreachable(n cluster.Node, err error) string {
	return fmt.Sprintf("node %s (%s) unreachable: %v", n.ID, n.Addr, err)
}

type apiKey struct{}

// isAPI reports whether r is an API request (not sandbox traffic): the
// gateway's own answers to it carry CORS headers.
func isAPI(r *http.Request) bool { return r.Context().Value(apiKey{}) != nil }

// writeError writes an E2B error body, with CORS headers on API answers.
func writeError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if isAPI(r) && w.Header().Get("Access-Control-Allow-Origin") == "" {
		setCORS(w, r)
	}
	middleware.WriteError(w, status, msg)
}

// writeJSON writes a JSON answer, with CORS headers on API answers.
func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	if isAPI(r) && w.Header().Get("Access-Control-Allow-Origin") == "" {
		setCORS(w, r)
	}
	middleware.WriteJSON(w, status, v)
}
