package gateway

import (
	"bytes"
	"errors"
	"io"
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/cluster"
)

// A route cache entry is dropped when the store tells this api instance
// that the sandbox's row changed, and that notice can come a moment after
// another api instance moved the sandbox: a client that connects through
// this instance right then would be sent to the old node and told 404,
// although the sandbox lives (seen in the cluster stage: 70 ms after a
// move through api2, a connect through api1). So an API request routed
// by the cache that gets a 404 reads the store again: when another node
// holds the sandbox now, the request goes there; otherwise the node's 404
// is passed on as it came.

// errNotHeld is an attempt's err when its node answered 404 and the
// answer was held back (attempt.holdNotFound).
var errNotHeld = errors.New("the node does not hold the sandbox")

// maxReplayBody bounds the body of a request that may be sent twice. An
// API request about one sandbox (connect, timeout, pause, …) is small JSON;
// a larger body is not buffered and such a request is not sent again.
const maxReplayBody = 64 << 10

// replayBody is a buffered request body.
type replayBody struct{ b []byte }

// bufferBody reads r's body when it is small and of known length, so that
// r can be sent again; nil when it cannot be.
func bufferBody(r *http.Request) *replayBody {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return &replayBody{}
	}
	if r.ContentLength < 0 || r.ContentLength > maxReplayBody {
		return nil
	}
	// On a read error (the client went away) what was read goes on as the
	// body, and the node answers that.
	b, _ := io.ReadAll(io.LimitReader(r.Body, r.ContentLength))
	r.Body.Close()
	return &replayBody{b: b}
}

// rewind sets r's body to the buffered bytes.
func (p *replayBody) rewind(r *http.Request) {
	if len(p.b) == 0 && (r.Body == nil || r.Body == http.NoBody) {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(p.b))
	r.ContentLength = int64(len(p.b))
	r.Header.Del("Transfer-Encoding")
	r.TransferEncoding = nil
}

// heldResponse is a node's answer kept back to be written later.
type heldResponse struct {
	status int
	header http.Header
	body   []byte
}

// holdResponse reads resp (a 404: an error body) into a heldResponse.
func holdResponse(resp *http.Response) *heldResponse {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	h := resp.Header.Clone()
	h.Del("Content-Length")
	return &heldResponse{status: resp.StatusCode, header: h, body: b}
}

// write writes the held answer to w.
func (h *heldResponse) write(w http.ResponseWriter) {
	for k, v := range h.header {
		w.Header()[k] = v
	}
	w.WriteHeader(h.status)
	_, _ = w.Write(h.body)
}

// notHeld answers a request whose node n said 404 for sandbox id: the
// route is read from the store again, and the request goes to the node
// holding the sandbox now, or the held 404 is passed on.
func (g *Gateway) notHeld(w http.ResponseWriter, r *http.Request, id string, n cluster.Node, held *heldResponse, replay *replayBody) {
	g.routes.drop(id)
	now, rerr := g.owner(r.Context(), id)
	if rerr != nil || now.ID == n.ID {
		if held.header.Get(cluster.HeaderNode) == "" {
			held.header.Set(cluster.HeaderNode, n.ID)
		}
		held.write(w)
		return
	}
	g.log.Info("a cached route was stale: the sandbox moved; sending the request to its node", "sandbox", id, "was", n.ID, "now", now.ID)
	replay.rewind(r)
	g.forwardOwned(w, r, id, now)
}
