//go:build linux

// Package server is the agent's HTTP surface: the Connect services
// (process.Process, filesystem.Filesystem), /files, /health, /init, /envs and
// /metrics, behind CORS and access-token middleware (spec §3.1, §3.2, §3.5).
//
// Access to /init: the daemon's proxy never forwards /init, but the agent
// also protects itself. While no access token is set, /init is open (the
// daemon initialises a fresh agent). Once a token is set, /init must carry
// X-Access-Token equal to the current token; a request that is not
// authenticated that way is rejected with 401, so code inside the sandbox
// that does not know the token cannot replace it, change the default user or
// inject env vars.
package server

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/envd/filesystem"
	"github.com/airlock-sandbox/airlock/internal/envd/state"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

// Options tunes New. The zero value is ready to use.
type Options struct {
	// Process overrides the Process service (default process.New).
	Process processpbconnect.ProcessHandler
	// Filesystem overrides the Filesystem service (default filesystem.New).
	Filesystem filesystempbconnect.FilesystemHandler
	// Files overrides the /files handler (default files.New).
	Files http.Handler
	// SetClock sets the system clock for /init timestamps. Default: settimeofday
	// when running as root, otherwise a no-op.
	SetClock func(time.Time) error
	// Version is reported in X-Envd-Version (default state.Version).
	Version string
	// CABundlePath and CAExtraPath are where /init's caBundle goes
	// (default DefaultCABundlePath, DefaultCAExtraPath; cabundle.go).
	CABundlePath, CAExtraPath string
}

func (o Options) caPaths() (string, string) {
	bundle, extra := o.CABundlePath, o.CAExtraPath
	if bundle == "" {
		bundle = DefaultCABundlePath
	}
	if extra == "" {
		extra = DefaultCAExtraPath
	}
	return bundle, extra
}

// Handler is the agent's root handler. Close releases background work of the
// services (watchers).
type Handler struct {
	st      *state.State
	log     *slog.Logger
	opts    Options
	mux     *http.ServeMux
	closers []io.Closer
	errw    *connect.ErrorWriter
	metrics *metricsSampler
}

// New composes the agent's HTTP handler. The concrete type is *Handler.
func New(st *state.State, log *slog.Logger, opts Options) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	if opts.Version == "" {
		opts.Version = state.Version
	}
	if opts.SetClock == nil {
		opts.SetClock = setClock
	}
	h := &Handler{
		st:      st,
		log:     log.With("component", "envd-server"),
		opts:    opts,
		mux:     http.NewServeMux(),
		errw:    connect.NewErrorWriter(),
		metrics: &metricsSampler{},
	}
	proc, fs, files := h.services()
	if c, ok := fs.(io.Closer); ok {
		h.closers = append(h.closers, c)
	}
	h.mux.Handle(processpbconnect.NewProcessHandler(proc))
	fsPath, fsHandler := filesystempbconnect.NewFilesystemHandler(fs)
	h.mux.Handle(fsPath, filesystem.FeedFlushes(fsHandler))
	h.mux.Handle("/files", files)
	h.mux.Handle("/files/", files)
	h.mux.HandleFunc("GET /health", h.health)
	h.mux.HandleFunc("POST /init", h.init)
	h.mux.HandleFunc("GET /envs", h.envs)
	h.mux.HandleFunc("GET /metrics", h.metricsHandler)
	return h
}

// Close stops the services' background work.
func (h *Handler) Close() error {
	var errs []error
	for _, c := range h.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// ServeHTTP applies CORS and authentication, then routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cors(w, r)
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if !exempt(r) && !h.st.CheckToken(r.Header.Get("X-Access-Token")) {
		h.unauthorized(w, r, "invalid or missing access token (X-Access-Token)")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// exempt lists the requests that do their own authentication or none:
// GET /health, POST /init (checked in the handler) and /files (header or URL
// signature, checked by the files handler).
func exempt(r *http.Request) bool {
	switch {
	case r.URL.Path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		return true
	case r.URL.Path == "/init" && r.Method == http.MethodPost:
		return true
	case r.URL.Path == "/files" || strings.HasPrefix(r.URL.Path, "/files/"):
		return true
	}
	return false
}

// unauthorized answers 401: Connect-shaped for RPCs, JSON otherwise.
func (h *Handler) unauthorized(w http.ResponseWriter, r *http.Request, msg string) {
	if isRPCPath(r.URL.Path) && h.errw.IsSupported(r) {
		_ = h.errw.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errors.New(msg)))
		return
	}
	writeError(w, http.StatusUnauthorized, msg)
}

// isRPCPath reports whether path belongs to one of the Connect services.
func isRPCPath(path string) bool {
	return strings.HasPrefix(path, "/"+processpbconnect.ProcessName+"/") ||
		strings.HasPrefix(path, "/"+filesystempbconnect.FilesystemName+"/")
}

// writeError writes the agent's JSON error body {"code":<status>,"message":…}.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Headers allowed and exposed for browser clients (spec §3.5).
var (
	exposedHeaders = strings.Join([]string{
		"Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin",
		"Connect-Protocol-Version", "Connect-Content-Encoding", "Connect-Accept-Encoding",
		"Content-Encoding", "Content-Disposition", "Content-Length",
		"Location", "Cache-Control", "X-Content-Type-Options", "X-Envd-Version",
	}, ", ")
	allowedMethods = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
)

// cors allows any origin, method and header.
func cors(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	origin := r.Header.Get("Origin")
	if origin == "" {
		hd.Set("Access-Control-Allow-Origin", "*")
	} else {
		hd.Set("Access-Control-Allow-Origin", origin)
		hd.Set("Access-Control-Allow-Credentials", "true")
		hd.Add("Vary", "Origin")
	}
	hd.Set("Access-Control-Expose-Headers", exposedHeaders)
	if r.Method == http.MethodOptions {
		m := r.Header.Get("Access-Control-Request-Method")
		if m == "" {
			m = allowedMethods
		}
		hd.Set("Access-Control-Allow-Methods", m)
		if reqH := r.Header.Get("Access-Control-Request-Headers"); reqH != "" {
			hd.Set("Access-Control-Allow-Headers", reqH)
		} else {
			hd.Set("Access-Control-Allow-Headers", "*")
		}
		hd.Set("Access-Control-Max-Age", "7200")
	}
}

func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Envd-Version", h.opts.Version)
	w.WriteHeader(http.StatusNoContent)
}

// NewHTTPServer returns an HTTP/1.1 server suited to the agent: long idle
// keep-alives (620 s) and no write timeout, since responses stream.
func NewHTTPServer(addr string, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       620 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
