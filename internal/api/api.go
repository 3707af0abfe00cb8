// Package api serves the E2B-compatible control-plane REST API (v1 and v2
// sandbox endpoints, templates) plus Airlock's own extensions under
// /airlock/v1/.
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/activity"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/secrets"
)

// ClientID is the deprecated constant clientID E2B returns.
const ClientID = "6532622b"

// maxBodyBytes caps request bodies.
const maxBodyBytes = 1 << 20

// Options configure the API handler.
type Options struct {
	// APIKey every request must carry in X-API-Key (except GET /health).
	APIKey string
	// Domain returned as the sandboxes' domain; "" ⇒ null (clients use
	// E2B_SANDBOX_URL / their own domain setting).
	Domain string
	Logger *slog.Logger
	// Metrics answers the sandbox metrics endpoints (nil: always empty).
	Metrics MetricsStore
	// Prometheus serves GET /metrics (nil: 404).
	Prometheus http.Handler
	// Runtime and RuntimeReason (the isolation runtime chosen at start and
	// why) are shown by GET /health when set.
	Runtime, RuntimeReason string
	// Platform and PlatformReason (gVisor's runsc platform, systrap or
	// ptrace, and why) are shown by GET /health when set.
	Platform, PlatformReason string
	// TemplateBuilds enables E2B's template build API (SDK builds); nil: 501.
	TemplateBuilds BuildStore
	// Trusted, when set, reports a request whose API key was checked before
	// it got here: a cluster node's, whose requests come only from the api
	// tier (the node checks the cluster secret in front of this handler and
	// the api tier marks what it authenticated). Other requests still need
	// the key or, for uploads, a valid signature.
	Trusted func(*http.Request) bool
	// Building lists the default templates still being prepared at start
	// (nil: none): GET /health shows them, and a create of one waits for it.
	Building func() []string
	// Volumes serves E2B's volume API (volumes.go); nil: 501.
	Volumes *Volumes
	// NoVolumes, with Volumes nil, says why (a cluster node without the
	// shared volume root): the 501 and the 400 of a create with
	// volumeMounts say it instead of "not enabled".
	NoVolumes string
	// Events serves E2B's lifecycle events and webhooks API (events.go);
	// nil: 503.
	Events *Events
	// Activity is the sandboxes' live activity feed (activity.go); nil:
	// 501.
	Activity *activity.Hub
	// Secrets serves E2B's /secrets (secrets.go); nil: 403.
	Secrets *secrets.Service
	// EgressProxy enables network.egressProxy (egress_proxy.go); nil:
	// refused with a 400.
	EgressProxy *EgressProxyOptions
	// Approvals serves the egress approval hook (approvals.go); nil: 501.
	Approvals *Approvals
}

// api holds the handler state.
type api struct {
	m         *sandbox.Manager
	templates Templates
	opts      Options
	log       *slog.Logger
	mux       *http.ServeMux
	auth      http.Handler // middleware.Key.Require in front of route
	sdk       sdkBuilds
}

// New returns the control-plane handler.
func New(m *sandbox.Manager, templates Templates, opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	a := &api{m: m, templates: templates, opts: opts, log: opts.Logger, mux: http.NewServeMux()}
	a.routes()
	a.auth = middleware.Key(opts.APIKey).Require(a.public, http.HandlerFunc(a.route))
	return a
}

func (a *api) routes() {
	h := a.mux.HandleFunc
	h("GET /health", a.health)

	h("POST /sandboxes", a.createV1)
	h("POST /v2/sandboxes", a.createV2)
	h("GET /sandboxes", a.listV1)
	h("GET /v2/sandboxes", a.listV2)
	h("GET /sandboxes/{id}", a.getSandbox)
	h("DELETE /sandboxes/{id}", a.killSandbox)
	h("POST /sandboxes/{id}/timeout", a.setTimeout)
	h("POST /sandboxes/{id}/refreshes", a.refresh)
	h("POST /sandboxes/{id}/connect", a.connectV1)
	h("POST /v2/sandboxes/{id}/connect", a.connectV2)
	h("POST /sandboxes/{id}/resume", a.resume)
	h("POST /sandboxes/{id}/pause", a.pause)
	h("POST /sandboxes/{id}/fork", a.fork)
	h("GET /sandboxes/{id}/metrics", a.sandboxMetrics)
	h("GET /sandboxes/metrics", a.sandboxesMetrics)
	h("GET /metrics", a.prometheus)
	h("PUT /sandboxes/{id}/network", a.updateNetwork)
	h("GET /sandboxes/{id}/network/log", a.networkLog)
	h("GET /sandboxes/{id}/logs", a.logsV1)
	h("GET /v2/sandboxes/{id}/logs", a.logsV2)
	h("POST /sandboxes/{id}/snapshots", a.createSnapshot)
	h("GET /snapshots", a.listSnapshots)

	a.volumeRoutes()
	a.eventRoutes()
	a.activityRoutes()
	a.approvalRoutes() // approvals.go
	a.secretRoutes()

	a.sdkRoutes()
	h("GET /templates", a.listTemplates)
	h("GET /v2/templates", a.listTemplates)
	h("GET /templates/{id}", a.getTemplate)
	// One pattern for /templates/aliases/{alias} and /templates/{id}/tags:
	// as two they would overlap on /templates/aliases/tags.
	h("GET /templates/{id}/{sub}", a.templateSubresource)
	h("POST /airlock/v1/templates/{name}/build", a.buildTemplate)
	h("GET /airlock/v1/templates/{name}", a.templateInfo)
	h("DELETE /airlock/v1/templates/{name}", a.removeTemplate)
	h("DELETE /templates/{id}", a.removeTemplate)
}

// ServeHTTP applies CORS, auth (middleware.Key) and the body cap, then
// routes.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setCORS(w, r)
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	a.auth.ServeHTTP(w, r)
}

// isHealth reports whether r is GET /health.
func isHealth(r *http.Request) bool { return r.Method == http.MethodGet && r.URL.Path == "/health" }

// public reports whether r needs no key: GET /health, a template file
// upload carrying a valid signed URL (the E2B CLI PUTs with no headers),
// and the volume content API (its handlers take a volume's token).
func (a *api) public(r *http.Request) bool {
	return (a.opts.Trusted != nil && a.opts.Trusted(r)) || isHealth(r) || a.signedUpload(r) || isVolumeContent(r)
}

// route applies the body cap and routes (after auth).
func (a *api) route(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil && !isVolumeUpload(r) { // bounded by the volume's size
		limit := int64(maxBodyBytes)
		if r.Method == http.MethodPost && isContextUpload(r) || isFileUpload(r) {
			limit = maxContextBytes
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
	}
	if _, pattern := a.mux.Handler(r); pattern == "" {
		middleware.WriteError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
		return
	}
	a.mux.ServeHTTP(w, r) // sets the path values
}

// setCORS lets browser SDKs call the API.
func setCORS(w http.ResponseWriter, r *http.Request) { middleware.SetCORS(w, r) }

// fail reports err: user errors as-is, others logged and hidden.
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	if ue, ok := sandbox.AsUserError(err); ok {
		middleware.WriteError(w, ue.Code, ue.Msg)
		return
	}
	a.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "request", middleware.RequestIDFrom(r.Context()), "err", err)
	// A sandbox that died while starting (its VMM could not open a
	// device, its kernel panicked): say why, in the runtime's words.
	var se *runtime.StoppedError
	if errors.As(err, &se) {
		middleware.WriteError(w, http.StatusInternalServerError, se.Error()+" (see the daemon log)")
		return
	}
	middleware.WriteError(w, http.StatusInternalServerError, "internal server error (see the daemon log)")
}

// decodeBody reads a JSON body into v. An empty body is allowed only when
// optional. It writes the error response itself and reports success.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			middleware.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", mbe.Limit))
			return false
		}
		middleware.WriteError(w, http.StatusBadRequest, "reading request body: "+err.Error())
		return false
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		if optional {
			return true
		}
		middleware.WriteError(w, http.StatusBadRequest, "request body is required")
		return false
	}
	if err := json.Unmarshal(data, v); err != nil {
		middleware.WriteError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return false
	}
	return true
}

func (a *api) health(w http.ResponseWriter, r *http.Request) {
	var building []string
	if a.opts.Building != nil {
		building = a.opts.Building()
	}
	if a.m == nil || !a.m.Ready() {
		msg := "not ready: templates are being prepared"
		if len(building) > 0 {
			msg += " (building: " + strings.Join(building, ", ") + ")"
		}
		middleware.WriteError(w, http.StatusServiceUnavailable, msg)
		return
	}
	body := map[string]any{"status": "ok"}
	if len(building) > 0 {
		// Ready for the others; creates of these wait until they are built.
		body["building"] = building
	}
	if a.opts.Runtime != "" {
		body["runtime"], body["runtimeReason"] = a.opts.Runtime, a.opts.RuntimeReason
	}
	if a.opts.Platform != "" {
		body["platform"], body["platformReason"] = a.opts.Platform, a.opts.PlatformReason
	}
	middleware.WriteJSON(w, http.StatusOK, body)
}
