package clustertls

import (
	"fmt"
	"net/http"
	"sync"
)

// Transport is the api tier's http.RoundTripper to the nodes: each request
// names its node (WithNode on its context) and goes over a connection whose
// server proved to be that node (ClientConfig). Connections are pooled per
// node and address, never shared between nodes: a connection verified as
// node X is never reused for a request meant for node Y, even when the
// nodes table gives both the same address.
type Transport struct {
	m *Material
	// base makes the plain transport each pool starts from (timeouts,
	// pool sizes); its TLSClientConfig is replaced.
	base func() *http.Transport

	mu    sync.Mutex
	pools map[poolKey]*http.Transport // guarded by mu
}

type poolKey struct{ node, addr string }

// NewTransport returns a Transport that authenticates with m; base makes
// the underlying transports.
func NewTransport(m *Material, base func() *http.Transport) *Transport {
	return &Transport{m: m, base: base, pools: map[poolKey]*http.Transport{}}
}

// RoundTrip sends req over a connection verified to reach the node
// WithNode named; a request naming no node is refused. req must be https.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	id := NodeFrom(req.Context())
	if id == "" {
		closeBody(req)
		return nil, fmt.Errorf("clustertls: request to %s names no node to verify", req.URL.Host)
	}
	if req.URL.Scheme != "https" {
		closeBody(req)
		return nil, fmt.Errorf("clustertls: request to node %s is %s, not https", id, req.URL.Scheme)
	}
	return t.pool(id, req.URL.Host).RoundTrip(req)
}

func (t *Transport) pool(id, addr string) *http.Transport {
	k := poolKey{id, addr}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.pools[k]; ok {
		return p
	}
	// A node that moved: its old address's pool goes.
	for old, p := range t.pools {
		if old.node == id {
			p.CloseIdleConnections()
			delete(t.pools, old)
		}
	}
	p := t.base()
	p.TLSClientConfig = t.m.ClientConfig(id)
	p.ForceAttemptHTTP2 = false
	t.pools[k] = p
	return p
}

// CloseIdleConnections closes every pool's idle connections.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.pools {
		p.CloseIdleConnections()
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
