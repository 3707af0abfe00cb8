package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
)

// HeaderPartial names, comma-separated, the nodes a merged list leaves out
// because they failed to answer.
const HeaderPartial = "X-Airlock-Partial"

// maxListBody caps one node's answer to a list.
const maxListBody = 64 << 20

// nodeAnswer is one node's answer to a fanned-out request.
type nodeAnswer struct {
	node   cluster.Node
	status int
	header http.Header
	body   []byte
	err    error
}

// fanOut sends r (a GET: same path and query) to every live and draining
// node in parallel.
func (g *Gateway) fanOut(r *http.Request) []nodeAnswer {
	nodes := g.nodesIn(cluster.StateLive, cluster.StateDraining)
	out := make([]nodeAnswer, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { out[i] = g.ask(r, n) })
	}
	wg.Wait()
	return out
}

// fanOutTimeout bounds one node's answer to a fanned-out list: a node that
// accepts the request and never answers is left out (X-Airlock-Partial)
// instead of hanging the list (found in review).
const fanOutTimeout = 10 * time.Second

func (g *Gateway) ask(r *http.Request, n cluster.Node) nodeAnswer {
	a := nodeAnswer{node: n}
	ctx, cancel := context.WithTimeout(clustertls.WithNode(r.Context(), n.ID), fanOutTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, "https://"+n.Addr+r.URL.RequestURI(), nil)
	if err != nil {
		a.err = err
		return a
	}
	req.Header = r.Header.Clone()
	req.Header.Del(cluster.HeaderInternal)
	req.Header.Del(cluster.HeaderSecret)
	req.Header.Set(cluster.HeaderSecret, g.opts.Secret)
	markAuthenticated(r, req.Header)
	req.Header.Del("Accept-Encoding")
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		req.Header.Set("X-Forwarded-For", ip)
	}
	req.Host = r.Host
	resp, err := g.client.Do(req)
	if err != nil {
		a.err = err
		return a
	}
	defer resp.Body.Close()
	a.status, a.header = resp.StatusCode, resp.Header
	a.body, a.err = io.ReadAll(io.LimitReader(resp.Body, maxListBody))
	return a
}

// merged sorts a fan-out's answers: the 2xx ones are returned for merging
// and the failed nodes named in X-Airlock-Partial. A node's 4xx (a bad
// query: every node would say the same) is passed on as the answer; so is
// a failure of every node. ok is false when an answer was written.
func (g *Gateway) merged(w http.ResponseWriter, r *http.Request, answers []nodeAnswer) (good []nodeAnswer, ok bool) {
	var failed, why []string
	for _, a := range answers {
		switch {
		case a.err != nil:
			failed = append(failed, a.node.ID)
			why = append(why, fmt.Sprintf("%s: %v", a.node.ID, a.err))
		case a.status >= 400 && a.status < 500:
			if ct := a.header.Get("Content-Type"); ct != "" {
				w.Header().Set("Content-Type", ct)
			}
			w.Header().Set(cluster.HeaderNode, a.node.ID)
			w.WriteHeader(a.status)
			_, _ = w.Write(a.body)
			return nil, false
		case a.status < 200 || a.status >= 300:
			failed = append(failed, a.node.ID)
			why = append(why, fmt.Sprintf("%s: status %d: %s", a.node.ID, a.status, strings.TrimSpace(string(a.body))))
		default:
			good = append(good, a)
		}
	}
	if len(failed) > 0 {
		g.log.Warn("list: nodes left out", "path", r.URL.Path, "failed", why)
		if len(good) == 0 {
			writeError(w, r, http.StatusBadGateway, "no node answered: "+strings.Join(why, "; "))
			return nil, false
		}
		slices.Sort(failed)
		w.Header().Set(HeaderPartial, strings.Join(failed, ","))
	}
	return good, true
}
