package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
	"github.com/airlock-sandbox/airlock/internal/cluster/placement"
	"github.com/airlock-sandbox/airlock/internal/middleware"
)

// Options configure a Gateway.
type Options struct {
	Store  cluster.Store
	Secret string // cluster secret sent to nodes (cluster.HeaderSecret)
	// TLS is the api tier's certificate and the cluster CA: every request
	// to a node is TLS, authenticated both ways (clustertls.Transport).
	TLS    *clustertls.Material
	APIKey string // the clients' API key (middleware.Key)
	// Domain: sandboxes are reached at <port>-<id>.<domain>; api.<domain>
	// is an API host.
	Domain string
	// Template returns the CPUs and memory a create of template needs (for
	// placement); nil or an error: 2 CPUs, 512 MiB.
	Template func(ctx context.Context, name string) (cpus, memoryMB int, err error)
	// VerifySignature checks a signed /files URL against a sandbox's access
	// token (guest.VerifySignature); nil: header-less signed URLs are not
	// routed.
	VerifySignature func(q url.Values, op, token string, now time.Time) error
	// Transport to the nodes; nil: a clustertls.Transport with TLS (its
	// requests name their node: clustertls.WithNode).
	Transport http.RoundTripper
	Logger    *slog.Logger
	Placement placement.Config
	// UnauthRate and UnauthBurst bound, per client address, what requests
	// without the API key make the api tier do: store reads for routes it
	// has not cached, moves and resumes of paused sandboxes, signed /files
	// lookups (0: DefaultUnauthRate, DefaultUnauthBurst).
	UnauthRate  float64
	UnauthBurst int
	// PullTemplates says the nodes share an artifact store (--artifacts) and
	// pull a template they lack on first use: a create may then go to any
	// node (holders are still preferred), not only to those holding it.
	PullTemplates bool
}

// Default resources of a create whose template's are unknown.
const (
	defaultCPUs     = 2
	defaultMemoryMB = 512
)

// Gateway routes the api tier's requests to the nodes. It is safe for
// concurrent use.
type Gateway struct {
	opts     Options
	log      *slog.Logger
	key      middleware.Key
	apiHosts map[string]bool
	store    cluster.Store
	placer   *placement.Placer
	reg      registry
	routes   routeCache
	unknown  ttlSet         // ids the store does not know, for a few seconds
	stay     ttlSet         // sandboxes of draining nodes that cannot move (running), for a few seconds
	routed   ttlSet         // sandboxes routed a moment ago (their traffic is not limited)
	unauth   *clientLimiter // per client: the cost of requests without the API key
	tokens   tokenIndex     // access tokens, for header-less signed /files URLs
	fwd      *forwarder
	client   *http.Client // fan-out lists
	auth     http.Handler // middleware.Key.Require in front of route
	// refreshMu serializes on-demand registry reads (an unknown node id).
	refreshMu sync.Mutex
	// readMu serializes every registry read (refresh), so that an older
	// read finishing last never overwrites a newer one (found in review:
	// it removed a node that had just registered).
	readMu sync.Mutex
	// lastReadStart is when the last successful registry read started
	// (under readMu).
	lastReadStart time.Time
}

// New returns a Gateway; Run must run for it to learn the nodes.
func New(opts Options) (*Gateway, error) {
	if opts.Store == nil {
		return nil, errors.New("gateway: no cluster store")
	}
	if opts.Secret == "" {
		return nil, errors.New("gateway: no cluster secret")
	}
	if opts.APIKey == "" {
		return nil, errors.New("gateway: no API key")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.UnauthRate <= 0 {
		opts.UnauthRate = DefaultUnauthRate
	}
	if opts.UnauthBurst <= 0 {
		opts.UnauthBurst = DefaultUnauthBurst
	}
	if opts.TLS == nil {
		return nil, errors.New("gateway: no cluster TLS material (the api tier's certificate and the cluster CA)")
	}
	if opts.Transport == nil {
		opts.Transport = clustertls.NewTransport(opts.TLS, defaultTransport)
	}
	g := &Gateway{
		opts:     opts,
		log:      opts.Logger,
		key:      middleware.Key(opts.APIKey),
		apiHosts: map[string]bool{},
		store:    opts.Store,
		placer:   placement.New(opts.Placement),
		unauth:   newClientLimiter(rate.Limit(opts.UnauthRate), opts.UnauthBurst),
		// Never follow a node's redirect: the request carries the secret.
		client: &http.Client{Transport: opts.Transport, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
	}
	if opts.Domain != "" {
		g.apiHosts["api."+strings.ToLower(opts.Domain)] = true
	}
	g.reg.nodes = map[string]cluster.Node{}
	g.routes.m = map[string]string{}
	g.fwd = newForwarder(g)
	g.auth = g.key.Require(g.public, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.key.Authorized(r) { // not a public request let through by its shape
			r = r.WithContext(context.WithValue(r.Context(), keyCheckedKey{}, true))
		}
		g.route(w, r)
	}))
	return g, nil
}

// defaultTransport is the pooled transport to the nodes: direct, no
// compression (streams pass as they are), long idle for keep-alive.
func defaultTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		DisableCompression:    true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// Run keeps the node registry, the lost-node reaper and the route cache's
// invalidation going until ctx ends. It returns ctx's error.
func (g *Gateway) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { g.runRegistry(ctx) })
	wg.Go(func() { g.runReaper(ctx) })
	wg.Go(func() { g.runRouteWatch(ctx) })
	wg.Wait()
	return ctx.Err()
}

// ServeHTTP routes one request: sandbox traffic to its node, then (after
// CORS, GET /health and the API key) the API by path.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.ensureSynced(r.Context())
	if g.serveSandboxTraffic(w, r) {
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), apiKey{}, true))
	setCORS(w, r)
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == "/health" {
		g.health(w, r)
		return
	}
	if id, ok := browserPTY(r); ok { // its key comes in the first message
		g.servePTY(w, r, id)
		return
	}
	g.auth.ServeHTTP(w, r)
}

// public reports whether an API request needs no key: a signed template
// file upload, by its shape (the node checks the signature), and what a
// browser loads before its user logs in to the web console, which a single
// host serves without a key too (internal/console): the console's static
// files and the redirect of a browser's GET / to them; and the volume
// content API, whose node checks the volume's token (volumes.go).
func (g *Gateway) public(r *http.Request) bool {
	return signedUpload(r) || consoleStatic(r) || volumeContent(r)
}

// consoleStatic reports whether r asks for the web console's static files
// (GET or HEAD of /console or /console/… but not /console/api/…), or is a
// browser opening / (internal/console's wantsHTML).
func consoleStatic(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	if strings.Contains(p, "..") {
		return false
	}
	if p == "/" {
		return r.Method == http.MethodGet && r.Header.Get("X-API-Key") == "" && strings.Contains(r.Header.Get("Accept"), "text/html")
	}
	return p == "/console" || (strings.HasPrefix(p, "/console/") && !strings.HasPrefix(p, "/console/api/") && p != "/console/api")
}

// isAPIHost reports whether host (with or without port) is an API host.
func (g *Gateway) isAPIHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return g.apiHosts[strings.ToLower(host)]
}

// setCORS mirrors internal/api's CORS headers, for the answers the gateway
// writes itself (forwarded answers carry the node's: clearCORS).
func setCORS(w http.ResponseWriter, r *http.Request) { middleware.SetCORS(w, r, "X-Airlock-Partial") }

// clearCORS removes what setCORS set, before a node's answer (with its
// own CORS headers) is copied in.
func clearCORS(h http.Header) {
	for _, k := range []string{"Vary", "Access-Control-Allow-Origin", "Access-Control-Allow-Methods",
		"Access-Control-Allow-Headers", "Access-Control-Expose-Headers", "Access-Control-Max-Age"} {
		h.Del(k)
	}
}
