package console

import (
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

// Prefix is where the console is served.
const Prefix = "/console/"

// Processes gives the terminal a Process service client of a sandbox's agent.
type Processes interface {
	// ProcessClient returns a client of running sandbox id's agent; errors
	// that sandbox.AsUserError accepts are shown to the user.
	ProcessClient(id string) (processpbconnect.ProcessClient, error)
}

// Options configure the console handler.
type Options struct {
	// APIKey the console's endpoints require (X-API-Key, or the first
	// WebSocket message); the same key as the REST API's.
	APIKey string
	// Next serves every request that is not the console's (required).
	Next http.Handler
	// Processes starts terminals (nil: the terminal endpoint answers 501).
	Processes Processes
	// Overview supplies the overview charts (nil: empty series).
	Overview *metrics.Overview
	// Counts returns the number of sandboxes per state (nil: none).
	Counts func() map[string]int
	Logger *slog.Logger
	// Trusted, when set, reports a request whose API key was checked before
	// it got here (a cluster node's; see api.Options.Trusted): its key
	// checks are skipped.
	Trusted func(*http.Request) bool
}

// Handler serves the console and passes everything else to Options.Next.
type Handler struct {
	opts   Options
	files  fs.FS
	static http.Handler
	mux    *http.ServeMux
	log    *slog.Logger
	key    middleware.Key
}

// New returns the console handler.
func New(opts Options) *Handler {
	return newWithFS(opts, assets())
}

func newWithFS(opts Options, files fs.FS) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &Handler{opts: opts, files: files, static: http.FileServerFS(files), mux: http.NewServeMux(), log: opts.Logger, key: middleware.Key(opts.APIKey)}
	h.mux.HandleFunc("GET /console/api/overview", h.overview)
	h.mux.HandleFunc("GET /console/api/sandboxes/{id}/pty", h.pty)
	h.mux.HandleFunc("/console/api/", func(w http.ResponseWriter, r *http.Request) {
		middleware.WriteError(w, http.StatusNotFound, "no such console endpoint: "+r.Method+" "+r.URL.Path)
	})
	h.mux.HandleFunc("/console/", h.serveStatic)
	return h
}

// ServeHTTP routes console paths and hands the rest to Options.Next.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/console" || (p == "/" && r.Method == http.MethodGet && wantsHTML(r)):
		http.Redirect(w, r, Prefix, http.StatusFound)
	case strings.HasPrefix(p, Prefix):
		h.mux.ServeHTTP(w, r)
	default:
		h.opts.Next.ServeHTTP(w, r)
	}
}

// wantsHTML reports whether r comes from a browser navigating to a page
// (API clients never send X-API-Key-less GET / asking for HTML).
func wantsHTML(r *http.Request) bool {
	return r.Header.Get("X-API-Key") == "" && strings.Contains(r.Header.Get("Accept"), "text/html")
}

// authorized checks the API key the request carries (middleware.Key: the
// REST API's check).
func (h *Handler) authorized(r *http.Request) bool {
	return (h.opts.Trusted != nil && h.opts.Trusted(r)) || h.key.Authorized(r)
}

// securityHeaders keep the console's pages from being framed and from
// loading anything but their own files. Rich results from sandboxes (HTML,
// Markdown) are rendered by the front-end in sandboxed iframes, without
// scripts.
func securityHeaders(w http.ResponseWriter) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "+
		"connect-src 'self' ws: wss:; frame-src 'self' about: data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
}

// serveStatic serves the built front-end; unknown paths without an
// extension get index.html (client-side routes), and a build-less binary
// gets a page saying how to build the console.
func (h *Handler) serveStatic(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		middleware.WriteError(w, http.StatusMethodNotAllowed, "the console's files are read-only")
		return
	}
	securityHeaders(w)
	name := strings.TrimPrefix(path.Clean(r.URL.Path), "/console")
	name = strings.TrimPrefix(name, "/")
	if name != "" && name != "index.html" {
		if st, err := fs.Stat(h.files, name); err == nil && !st.IsDir() {
			if strings.HasPrefix(name, "assets/") { // content-hashed names
				w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
			}
			r2 := r.Clone(r.Context())
			r2.URL.Path = "/" + name
			h.static.ServeHTTP(w, r2)
			return
		}
		if path.Ext(name) != "" {
			middleware.WriteError(w, http.StatusNotFound, "no such console file: "+name)
			return
		}
	}
	index, err := fs.ReadFile(h.files, "index.html")
	if errors.Is(err, fs.ErrNotExist) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(placeholderPage))
		return
	}
	if err != nil {
		h.log.Error("reading embedded console index", "err", err)
		middleware.WriteError(w, http.StatusInternalServerError, "internal server error (see the daemon log)")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(index)
}

const placeholderPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>Airlock console (not built)</title></head>
<body style="font-family: sans-serif; margin: 3em">
<h1>Airlock console</h1>
<p>This <code>airlock</code> binary was built without the console's front-end.
Run <code>scripts/setup.sh</code> (it builds <code>web/console</code> with npm and Vite, then the binary) and restart <code>airlock serve</code>.</p>
</body></html>
`

// overviewJSON is the body of GET /console/api/overview.
type overviewJSON struct {
	Now    int64          `json:"now"`
	States map[string]int `json:"states"` // sandboxes per state (running, paused)
	metrics.OverviewSnapshot
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r) {
		middleware.WriteError(w, http.StatusUnauthorized, middleware.UnauthorizedMessage)
		return
	}
	now := time.Now()
	out := overviewJSON{Now: now.Unix(), States: map[string]int{}}
	if h.opts.Counts != nil {
		out.States = h.opts.Counts()
	}
	if h.opts.Overview != nil {
		out.OverviewSnapshot = h.opts.Overview.Snapshot(now)
	} else {
		out.OverviewSnapshot = metrics.NewOverview("", 0, nil).Snapshot(now)
	}
	w.Header().Set("Cache-Control", "no-store")
	middleware.WriteJSON(w, http.StatusOK, out)
}
