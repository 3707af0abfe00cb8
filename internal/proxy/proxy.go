package proxy

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster/wire"
	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// EnvdPort is the agent's port; traffic tokens are never required for it.
const EnvdPort = guest.EnvdPort

// Header names used for routing (matched case-insensitively): the
// cluster contract's (internal/cluster/wire), which the api tier reads too.
const (
	HeaderSandboxID    = wire.HeaderSandboxID
	HeaderSandboxPort  = wire.HeaderSandboxPort
	HeaderTrafficToken = wire.HeaderTrafficToken
)

// ParseSandboxHost parses a "<port>-<id>.<domain>" Host
// (wire.ParseSandboxHost).
func ParseSandboxHost(host string) (port, id string, ok bool) { return wire.ParseSandboxHost(host) }

// internalPaths are agent endpoints only the daemon may call.
var internalPaths = map[string]bool{
	"/init": true, "/freeze": true, "/unfreeze": true, "/collapse": true,
	"/fsfreeze": true, "/fsthaw": true, "/upgrade": true, "/airlock/process-events": true,
}

// Target is a routable sandbox.
type Target struct {
	ID           string
	Addr         netip.Addr // guest address
	AccessToken  string     // envd access token ("" = unsecured)
	TrafficToken string     // required on non-envd ports when set
	// MaskRequestHost replaces the Host header of forwarded requests when
	// set, "${PORT}" by the port (E2B's network.maskRequestHost).
	MaskRequestHost string
}

// Resolver finds live sandboxes.
type Resolver interface {
	Lookup(id string) (Target, bool)
	// Targets lists every live sandbox (used for signed /files routing).
	Targets() []Target
}

// VerifyFunc checks a signed /files URL against a sandbox access token
// (guest.VerifySignature).
type VerifyFunc func(q url.Values, operation, token string, now time.Time) error

// Options configure the proxy.
type Options struct {
	// APIHosts are host names (without port) that always reach the API,
	// even if they look like sandbox hosts.
	APIHosts []string
	// VerifySignature enables routing of header-less signed /files requests.
	VerifySignature VerifyFunc
	// Transport to the sandboxes; default: direct (no HTTP proxy), 5 s dial
	// timeout, no compression, 620 s idle.
	Transport http.RoundTripper
	Logger    *slog.Logger
	// UploadGuard, when set, is asked before an upload (POST/PUT /files to
	// envd) is forwarded; an error refuses it (see uploadGuard in disk.go).
	UploadGuard func() error
	// APIKey is the daemon's API key: an X-API-Key or Authorization header
	// that carries it is removed before a request reaches sandbox code
	// (keyheaders.go).
	APIKey string
}

type proxy struct {
	res      Resolver
	api      http.Handler
	opts     Options
	log      *slog.Logger
	apiHosts map[string]bool
	rp       *httputil.ReverseProxy
	owners   addrOwners
}

type ctxKey struct{}

// routeInfo travels from ServeHTTP to the ReverseProxy callbacks.
type routeInfo struct {
	id   string
	addr string // host:port
	// apiOrigin: the request did not name the sandbox by its Host, so the
	// answer is served on the API's (and the console's) origin.
	apiOrigin bool
	// host, when set, is the Host header the sandbox gets (the target's
	// MaskRequestHost for this port); else it gets addr.
	host string
}

// New returns the combined API + sandbox-traffic handler.
func New(res Resolver, api http.Handler, opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Transport == nil {
		opts.Transport = DefaultTransport()
	}
	p := &proxy{res: res, api: api, opts: opts, log: opts.Logger, apiHosts: map[string]bool{}}
	for _, h := range opts.APIHosts {
		p.apiHosts[strings.ToLower(h)] = true
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:       p.rewrite,
		Transport:     opts.Transport,
		FlushInterval: -1,
		ErrorHandler:  p.upstreamError,
		// A stream cut because its sandbox went away ends with a Connect
		// error saying why (endstream.go).
		ModifyResponse: p.modifyResponse,
		ErrorLog:       slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
	}
	return p
}

// DefaultTransport is the transport used to reach sandboxes.
func DefaultTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       620 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id := r.Header.Get(HeaderSandboxID); id != "" {
		port := r.Header.Get(HeaderSandboxPort)
		if port == "" {
			port = strconv.Itoa(EnvdPort)
		}
		p.serveSandbox(w, r, id, port)
		return
	}
	if !p.isAPIHost(r.Host) {
		if port, id, ok := wire.ParseSandboxHost(r.Host); ok {
			p.serveSandbox(w, r, id, port)
			return
		}
	}
	if r.URL.Path == "/files" && r.URL.Query().Get("signature") != "" && p.opts.VerifySignature != nil {
		p.serveSigned(w, r)
		return
	}
	p.api.ServeHTTP(w, r)
}

func (p *proxy) isAPIHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return p.apiHosts[strings.ToLower(host)]
}

// serveSandbox validates the route and proxies to the sandbox.
func (p *proxy) serveSandbox(w http.ResponseWriter, r *http.Request, id, portStr string) {
	if wire.ValidID(id) != nil {
		http.Error(w, "invalid sandbox id", http.StatusBadRequest)
		return
	}
	port, ok := wire.ParsePort(portStr)
	if !ok {
		http.Error(w, "invalid sandbox port", http.StatusBadRequest)
		return
	}
	if internalPaths[r.URL.Path] {
		middleware.WriteError(w, http.StatusNotFound, "not found")
		return
	}
	t, ok := p.res.Lookup(id)
	if !ok {
		sandboxGone(w, id)
		return
	}
	if port != EnvdPort && t.TrafficToken != "" {
		got := r.Header.Get(HeaderTrafficToken)
		if subtle.ConstantTimeCompare([]byte(got), []byte(t.TrafficToken)) != 1 {
			middleware.WriteJSON(w, http.StatusForbidden, map[string]any{"code": http.StatusForbidden, "sandboxId": id,
				"message": "missing or invalid traffic access token"})
			return
		}
	}
	p.forward(w, r, t, port)
}

// serveSigned routes a header-less signed /files request to the sandbox whose
// access token validates the signature.
func (p *proxy) serveSigned(w http.ResponseWriter, r *http.Request) {
	op := "read"
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		op = "write"
	}
	q := r.URL.Query()
	now := time.Now()
	expired := false
	for _, t := range p.res.Targets() {
		if t.AccessToken == "" {
			continue
		}
		err := p.opts.VerifySignature(q, op, t.AccessToken, now)
		if err == nil {
			p.forward(w, r, t, EnvdPort)
			return
		}
		if strings.Contains(strings.ToLower(err.Error()), "expired") {
			expired = true
		}
	}
	msg := "invalid signature: no sandbox matches"
	if expired {
		msg = "signature is already expired"
	}
	middleware.WriteError(w, http.StatusUnauthorized, msg)
}

func (p *proxy) forward(w http.ResponseWriter, r *http.Request, t Target, port int) {
	if port == EnvdPort && !p.uploadAllowed(w, r, t.ID) {
		return
	}
	info := &routeInfo{id: t.ID, addr: net.JoinHostPort(t.Addr.String(), strconv.Itoa(port)), apiOrigin: p.onAPIOrigin(r.Host),
		host: MaskedHost(t.MaskRequestHost, port)}
	p.owners.claim(t, p.opts.Transport)
	ctx, stop := p.cancelWhenGone(contextWithRoute(r.Context(), info), t)
	defer stop()
	// Sandbox traffic is full duplex (Connect streams, uploads answered while
	// the body is still being read). Without this, net/http closes the
	// inbound body as soon as the first response bytes are flushed; the
	// transport then fails writing the upstream request and tears down the
	// connection mid-stream ("incomplete envelope" on the client).
	_ = http.NewResponseController(w).EnableFullDuplex()
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// onAPIOrigin reports whether a request with this Host is on the API's
// origin (not a "<port>-<id>.<domain>" sandbox host): header-routed and
// signed /files traffic.
func (p *proxy) onAPIOrigin(host string) bool {
	if p.isAPIHost(host) {
		return true
	}
	_, _, ok := wire.ParseSandboxHost(host)
	return !ok
}

// SandboxContentPolicy is the Content-Security-Policy of every answer a
// sandbox gives on the API's origin. The origin is the console's, whose API
// key sits in the tab's sessionStorage, so a sandbox's file (a signed
// /files download of an .html file, or anything a sandbox's own agent
// answers) must not run script there: `sandbox` gives the document an
// opaque origin without scripts, forms or popups, and nothing is loaded
// from elsewhere. Sandbox hosts (<port>-<id>.<domain>) are the sandbox's
// own origin and keep what the sandbox sends.
const SandboxContentPolicy = "sandbox; default-src 'none'; img-src 'self' data: blob:; media-src 'self' data: blob:; style-src 'unsafe-inline'"

// SetSandboxContentHeaders marks h as sandbox content served on the API's
// origin (see SandboxContentPolicy).
func SetSandboxContentHeaders(h http.Header) {
	h.Set("Content-Security-Policy", SandboxContentPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
}

// modifyResponse is the ReverseProxy's ModifyResponse.
func (p *proxy) modifyResponse(res *http.Response) error {
	if res.Request != nil && routeFromContext(res.Request.Context()).apiOrigin {
		SetSandboxContentHeaders(res.Header)
	}
	return p.endStreamOnGone(res)
}

// rewrite points the outgoing request at the sandbox and drops routing
// headers (ReverseProxy already strips hop-by-hop headers).
func (p *proxy) rewrite(pr *httputil.ProxyRequest) {
	info := routeFromContext(pr.In.Context())
	pr.SetURL(&url.URL{Scheme: "http", Host: info.addr})
	pr.Out.Host = info.addr
	if info.host != "" {
		pr.Out.Host = info.host
	}
	pr.SetXForwarded()
	pr.Out.Header.Del(HeaderSandboxID)
	pr.Out.Header.Del(HeaderSandboxPort)
	pr.Out.Header.Del(HeaderTrafficToken)
	stripAPIKey(pr.Out.Header, p.opts.APIKey)
}

// upstreamError answers 502 when the sandbox cannot be reached.
func (p *proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	info := routeFromContext(r.Context())
	if goneDuringRequest(r.Context()) {
		sandboxGone(w, info.id)
		return
	}
	if r.Context().Err() != nil {
		return // client went away
	}
	p.log.Debug("sandbox unreachable", "sandbox", info.id, "addr", info.addr, "err", err)
	sandboxGone(w, info.id)
}

func sandboxGone(w http.ResponseWriter, id string) {
	middleware.WriteJSON(w, http.StatusBadGateway, map[string]any{
		"sandboxId": id,
		"message":   "The sandbox was not found or is not reachable on this port",
		"code":      http.StatusBadGateway,
	})
}

// FromManager adapts the sandbox manager to a Resolver.
func FromManager(m *sandbox.Manager) Resolver { return managerResolver{m} }

type managerResolver struct{ m *sandbox.Manager }

// Lookup resumes a paused sandbox created with autoResume (waiting up to
// a minute); other paused sandboxes are not routable (502).
func (mr managerResolver) Lookup(id string) (Target, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := mr.m.Lookup(id)
	if err != nil {
		return Target{}, false
	}
	sb, err := e.EnsureRunning(ctx)
	if err != nil {
		return Target{}, false
	}
	return toTarget(sb), true
}

// GoneReason implements GoneReasoner with the manager's not-found message,
// which says why a sandbox stopped on its own (memory limit, agent killed).
func (mr managerResolver) GoneReason(id string) string {
	if _, err := mr.m.Lookup(id); err != nil {
		return err.Error()
	}
	return ""
}

func (mr managerResolver) Targets() []Target {
	sbs := mr.m.List()
	out := make([]Target, 0, len(sbs))
	for _, sb := range sbs {
		if sb.State == sandbox.StateRunning {
			out = append(out, toTarget(sb))
		}
	}
	return out
}

func toTarget(sb *sandbox.Sandbox) Target {
	return Target{ID: sb.ID, Addr: sb.GuestIP, AccessToken: sb.AccessToken, TrafficToken: sb.TrafficToken,
		MaskRequestHost: sb.MaskRequestHost}
}
