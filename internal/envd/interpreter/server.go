package interpreter

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/envd/identity"
	"github.com/airlock-sandbox/airlock/internal/envd/state"
)

// DefaultWarmup is run silently in every new Python context so the user's
// first `import pandas` does not pay for it.
const DefaultWarmup = "import numpy, pandas, matplotlib\nimport matplotlib.pyplot"

// keepaliveEvery is how often a keepalive line is sent without other output.
const keepaliveEvery = 5 * time.Second

// Options configure the interpreter service.
type Options struct {
	// StateDir holds connection files, kernel logs and the JS runner.
	StateDir string
	// Warmup is run silently in new Python contexts ("" = none).
	Warmup string
	// MaxContexts caps the contexts of the sandbox (default contexts
	// included) that POST /contexts may reach; 0 means DefaultMaxContexts.
	MaxContexts int
}

// DefaultMaxContexts is the default cap on a sandbox's contexts. Port 49999
// takes no access token on /contexts (the E2B SDKs send none there), so
// anyone who can reach a public sandbox could otherwise start kernels until
// it runs out of memory.
const DefaultMaxContexts = 32

// Server is the code-interpreter HTTP service.
type Server struct {
	st   *state.State
	log  *slog.Logger
	opts Options

	// mu guards contexts and defaults.
	mu       sync.Mutex
	contexts map[string]*entry
	defaults map[string]*entry // language → default context
	// seq numbers contexts in the order they were registered, which is the
	// order GET /contexts lists them in.
	seq uint64
	// starting counts contexts being created (not yet in contexts), for
	// the MaxContexts cap.
	starting int
}

type entry struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`

	seq uint64
	// ready is closed once the kernel has started (kernel is set) or failed
	// to (startErr is set); a default context is listed before that.
	ready    chan struct{}
	startErr error
	kernel   Kernel
	// mu serializes executions in this context and guards envApplied.
	mu         sync.Mutex
	envApplied map[string]string
	// lazy, when set, starts the kernel (and closes ready); it runs once,
	// on the first wait (the default JavaScript context: see
	// StartDefaults), or never if cancelLazy comes first.
	lazy     func()
	lazyOnce sync.Once
}

// errContextClosed is the start error of a lazy context closed before its
// first use.
var errContextClosed = errors.New("context closed before it started")

// kick starts a lazy kernel (once); it does nothing for the others.
func (e *entry) kick() {
	if e.lazy != nil {
		e.lazyOnce.Do(func() { go e.lazy() })
	}
}

// cancelLazy marks a lazy kernel that never started as closed, so that no
// later wait starts it and ready is closed.
func (e *entry) cancelLazy() {
	if e.lazy != nil {
		e.lazyOnce.Do(func() {
			e.startErr = errContextClosed
			close(e.ready)
		})
	}
}

// wait blocks until e's kernel has started and returns why it did not.
func (e *entry) wait(ctx context.Context) error {
	e.kick()
	select {
	case <-e.ready:
		return e.startErr
	case <-ctx.Done():
		return fmt.Errorf("waiting for context %s to start: %w", e.ID, ctx.Err())
	}
}

// New returns the service. Call StartDefaults to warm the default contexts.
func New(st *state.State, log *slog.Logger, opts Options) (*Server, error) {
	if opts.StateDir == "" {
		opts.StateDir = "/tmp/.airlock-interpreter"
	}
	if err := os.MkdirAll(opts.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("creating interpreter state dir: %w", err)
	}
	if opts.MaxContexts <= 0 {
		opts.MaxContexts = DefaultMaxContexts
	}
	return &Server{st: st, log: log, opts: opts, contexts: map[string]*entry{}, defaults: map[string]*entry{}}, nil
}

// StartDefaults registers the default Python and JavaScript contexts, in
// that order, before it returns (so GET /contexts lists them from the first
// request on). The Python kernel starts in the background; the JavaScript
// one (node, ~13 MiB that every sandbox would carry, and the boot snapshot
// with it) starts on the context's first use: an execution, a restart.
// Executions wait for the start. A language whose runtime is missing (a
// template without node) has no default; a kernel that fails to start is
// logged and unlisted.
func (s *Server) StartDefaults(ctx context.Context) {
	for _, lang := range []string{"python", "javascript"} {
		start := time.Now()
		e, err := s.registerDefault(lang, lang == "javascript")
		if err != nil {
			s.log.Warn("default context", "language", lang, "err", err)
			continue
		}
		if e.lazy != nil {
			continue
		}
		go func() {
			if err := e.wait(ctx); err != nil {
				s.log.Warn("default context", "language", lang, "err", err)
				return
			}
			s.log.Info("default context ready", "language", lang, "took", time.Since(start))
		}()
	}
}

// Close stops every kernel (a kernel still starting is stopped once it
// has).
func (s *Server) Close() {
	s.mu.Lock()
	all := make([]*entry, 0, len(s.contexts))
	for _, e := range s.contexts {
		all = append(all, e)
	}
	s.contexts = map[string]*entry{}
	s.defaults = map[string]*entry{}
	s.mu.Unlock()
	// Kernels still starting in the background are waited for and stopped
	// too, before Close returns: a kernel started after it would outlive
	// the server (and, in tests, the test binary, holding its inherited
	// descriptors).
	deadline := time.After(closeWait)
	for _, e := range all {
		e.cancelLazy()
		select {
		case <-e.ready:
			if e.kernel != nil {
				_ = e.kernel.Close()
			}
		case <-deadline:
			go closeWhenStarted(e)
		}
	}
}

// closeWait bounds how long Close waits for kernels still starting.
const closeWait = 30 * time.Second

// closeWhenStarted stops e's kernel once its start finished.
func closeWhenStarted(e *entry) {
	e.cancelLazy()
	<-e.ready
	if e.kernel != nil {
		_ = e.kernel.Close()
	}
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// baseEnv is a kernel's environment: fixed defaults, the user's identity and
// the sandbox env vars global (a snapshot taken by the caller).
func (s *Server) baseEnv(u *identity.User, global map[string]string) []string {
	env := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "E2B_SANDBOX": "true", "TERM": "xterm-256color",
	}
	if u != nil {
		env["HOME"], env["USER"], env["LOGNAME"] = u.Home, u.Name, u.Name
	}
	maps.Copy(env, global)
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// prepare checks a new context's language and cwd and returns its entry
// (not registered, kernel not started) and how its kernel is to run.
func (s *Server) prepare(language, cwd string) (*entry, runAs, error) {
	// Kernels run as root, as E2B's interpreter does in this template: a
	// context may work anywhere (cwd /root) and files written from code
	// belong to root. The default cwd is the default user's home.
	u, err := identity.Lookup("root")
	if err != nil {
		return nil, runAs{}, fmt.Errorf("kernel user: %w", err)
	}
	if cwd == "" {
		du, err := identity.Lookup(s.st.DefaultUser())
		if err != nil {
			return nil, runAs{}, fmt.Errorf("default user: %w", err)
		}
		cwd = du.Home
	}
	if err := checkCwd(cwd); err != nil {
		return nil, runAs{}, err
	}
	// Snapshot the sandbox env vars once: the kernel starts with exactly
	// these, and syncGlobalEnv later applies whatever changed since (e.g.
	// /init setting vars while this kernel was still starting).
	global := s.st.EnvVars()
	ra := runAs{user: u, cwd: cwd, env: s.baseEnv(u, global)}
	switch language {
	case "python", "bash":
	case "r", "java":
		if err := langAvailable(language, ra.env); err != nil {
			return nil, runAs{}, err
		}
	case "javascript", "typescript":
		if _, err := lookPathIn("node", ra.env); err != nil {
			return nil, runAs{}, fmt.Errorf("%w: %s needs node: %w", errUnsupported, language, err)
		}
	default:
		return nil, runAs{}, fmt.Errorf("%w: %q", errUnsupported, language)
	}
	e := &entry{ID: newID(), Language: language, Cwd: cwd, ready: make(chan struct{}), envApplied: global}
	return e, ra, nil
}

// start starts e's kernel and marks e ready (or failed).
func (s *Server) start(ctx context.Context, e *entry, ra runAs) error {
	var (
		k   Kernel
		err error
	)
	switch e.Language {
	case "python":
		k, err = newJupyterKernel(ctx, s.log, ra, s.opts.StateDir, s.opts.Warmup)
	case "javascript", "typescript":
		var p string
		if p, err = writeRunner(s.opts.StateDir); err == nil {
			k, err = newProcKernel(ctx, jsSpec(p, ra, e.Language == "typescript"), s.log)
		}
	case "bash":
		k, err = newProcKernel(ctx, bashSpec(s.opts.StateDir, ra), s.log)
	case "r", "java":
		k, err = s.startLang(ctx, e, ra)
	}
	if err != nil {
		e.startErr = fmt.Errorf("creating %s context: %w", e.Language, err)
	} else {
		e.kernel = k
	}
	close(e.ready)
	return e.startErr
}

// newContext creates a context and registers it once its kernel runs.
func (s *Server) newContext(ctx context.Context, language, cwd string) (*entry, error) {
	s.mu.Lock()
	if n := len(s.contexts) + s.starting; n >= s.opts.MaxContexts {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: this sandbox has %d contexts, at most %d are allowed; delete one first (DELETE /contexts/{id})",
			errTooManyContexts, n, s.opts.MaxContexts)
	}
	s.starting++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.starting--
		s.mu.Unlock()
	}()
	e, ra, err := s.prepare(language, cwd)
	if err != nil {
		return nil, err
	}
	if err := s.start(ctx, e, ra); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.addLocked(e)
	s.mu.Unlock()
	return e, nil
}

var errUnsupported = errors.New("unsupported language")

// errTooManyContexts marks a create beyond Options.MaxContexts (a 429).
var errTooManyContexts = errors.New("too many contexts")

// errBadCwd marks a context cwd the kernel cannot run in (a 400).
var errBadCwd = errors.New("invalid cwd")

// checkCwd tells why a kernel cannot start in cwd.
func checkCwd(cwd string) error {
	if !filepath.IsAbs(cwd) {
		return fmt.Errorf("%w: %q is not an absolute path", errBadCwd, cwd)
	}
	fi, err := os.Stat(cwd)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %q does not exist", errBadCwd, cwd)
	case err != nil:
		return fmt.Errorf("%w: %q: %w", errBadCwd, cwd, err)
	case !fi.IsDir():
		return fmt.Errorf("%w: %q is not a directory", errBadCwd, cwd)
	}
	return nil
}

// addLocked registers e as the newest context. s.mu must be held.
func (s *Server) addLocked(e *entry) {
	s.seq++
	e.seq = s.seq
	s.contexts[e.ID] = e
}

// registerDefault returns the default context of a language, registering
// it (listed at once) and starting its kernel in the background when there
// is none; with lazy, the kernel starts on the context's first wait instead,
// with the sandbox env vars of that moment.
func (s *Server) registerDefault(language string, lazy bool) (*entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.defaults[language]; ok {
		return e, nil
	}
	e, ra, err := s.prepare(language, "")
	if err != nil {
		return nil, err
	}
	s.defaults[language] = e
	s.addLocked(e)
	run := func() {
		if lazy {
			// The env vars may have changed since the registration (a
			// restored sandbox's /init): start with the current ones.
			global := s.st.EnvVars()
			ra.env = s.baseEnv(ra.user, global)
			e.mu.Lock()
			e.envApplied = global
			e.mu.Unlock()
		}
		if err := s.start(context.Background(), e, ra); err != nil {
			// Unlist it; the next use of the language tries again.
			s.mu.Lock()
			if s.contexts[e.ID] == e {
				delete(s.contexts, e.ID)
			}
			if s.defaults[language] == e {
				delete(s.defaults, language)
			}
			s.mu.Unlock()
		}
	}
	if lazy {
		e.lazy = run
	} else {
		go run()
	}
	return e, nil
}

// defaultContext returns the default context of a language once its kernel
// runs (creating it if there is none).
func (s *Server) defaultContext(ctx context.Context, language string) (*entry, error) {
	e, err := s.registerDefault(language, false)
	if err != nil {
		return nil, err
	}
	if err := e.wait(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// Handler returns the HTTP handler (port 49999).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `"OK"`)
	})
	mux.HandleFunc("POST /execute", s.handleExecute)
	mux.HandleFunc("GET /contexts", s.handleListContexts)
	mux.HandleFunc("POST /contexts", s.handleCreateContext)
	mux.HandleFunc("DELETE /contexts/{id}", s.handleDeleteContext)
	mux.HandleFunc("POST /contexts/{id}/restart", s.handleRestartContext)
	return cors(mux)
}

func cors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		if r.Method == http.MethodOptions {
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
			w.Header().Set("Access-Control-Allow-Headers", "*")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func textError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
}

type executeRequest struct {
	Code      string            `json:"code"`
	ContextID *string           `json:"context_id"`
	Language  *string           `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
	// Silent (an Airlock extension, used by the daemon to warm a context
	// before a boot snapshot) runs the code like Jupyter's silent
	// execute_request: no results, and the execution count is not advanced,
	// so the user's first cell is still number 1.
	Silent bool `json:"silent"`
}

func (s *Server) handleExecute(w http.ResponseWriter, r *http.Request) {
	if !s.st.CheckToken(r.Header.Get("X-Access-Token")) {
		textError(w, http.StatusUnauthorized, "invalid access token")
		return
	}
	var req executeRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20)).Decode(&req); err != nil {
		textError(w, http.StatusBadRequest, "invalid request body: "+err.Error())
		return
	}
	hasCtx := req.ContextID != nil && *req.ContextID != ""
	hasLang := req.Language != nil && *req.Language != ""
	if hasCtx && hasLang {
		textError(w, http.StatusBadRequest, "Only one of context_id or language can be provided")
		return
	}
	var e *entry
	var err error
	switch {
	case hasCtx:
		s.mu.Lock()
		e = s.contexts[*req.ContextID]
		if e == nil && *req.ContextID == "default" {
			e = s.defaults["python"]
		}
		s.mu.Unlock()
		if e == nil {
			textError(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", *req.ContextID))
			return
		}
	case hasLang:
		e, err = s.defaultContext(r.Context(), NormalizeLanguage(*req.Language))
	default:
		e, err = s.defaultContext(r.Context(), "python")
	}
	if err != nil {
		if errors.Is(err, errUnsupported) {
			textError(w, http.StatusBadRequest, err.Error())
			return
		}
		textError(w, http.StatusInternalServerError, err.Error())
		return
	}
	s.execute(w, r, e, req)
}

// lineWriter writes NDJSON lines. It flushes them together: at most
// flushDelay after the first unflushed line, and at the end of the execution
// (the handler's return). A quick cell's records (its count, result and end)
// then leave in one write instead of one TCP segment each, through the
// sandbox's network stack, the daemon's proxy and the client: each costs a
// wake-up there, and under gVisor a Sentry round trip.
type lineWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	flusher http.Flusher
	last    time.Time
	failed  bool
	timer   *time.Timer // pending flush, nil when none
	header  bool        // timer is the status line's (headerDelay)
	closed  bool        // after close no flush may touch w
}

// flushDelay bounds how long a written line waits to be flushed, and
// headerDelay how long the status line waits for the first lines.
const (
	flushDelay  = 2 * time.Millisecond
	headerDelay = 25 * time.Millisecond
)

func (lw *lineWriter) write(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.failed || lw.closed {
		return
	}
	if _, err := lw.w.Write(append(b, '\n')); err != nil {
		lw.failed = true
		return
	}
	switch {
	case lw.flusher == nil:
	case lw.timer == nil:
		lw.timer = time.AfterFunc(flushDelay, lw.flush)
	case lw.header:
		// A line is waiting now: flushDelay, not headerDelay.
		lw.header = false
		lw.timer.Reset(flushDelay)
	}
	lw.last = time.Now()
}

func (lw *lineWriter) flush() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.timer, lw.header = nil, false
	if !lw.closed && !lw.failed {
		lw.flusher.Flush()
	}
}

// close stops pending flushes; the handler's return sends what is left.
func (lw *lineWriter) close() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.closed = true
	if lw.timer != nil {
		lw.timer.Stop()
		lw.timer = nil
	}
}

func (lw *lineWriter) idle() time.Duration {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return time.Since(lw.last)
}

func outputRecord(o Output) map[string]any {
	switch o.Type {
	case "stdout", "stderr":
		return map[string]any{"type": o.Type, "text": o.Text, "timestamp": time.Now().UTC().Format(time.RFC3339Nano)}
	case "result":
		m := map[string]any{"type": "result", "is_main_result": o.IsMain}
		maps.Copy(m, o.Result)
		return m
	case "error":
		return map[string]any{"type": "error", "name": o.ErrName, "value": o.ErrValue, "traceback": o.Traceback}
	case "number_of_executions":
		return map[string]any{"type": "number_of_executions", "execution_count": o.ExecutionCount}
	}
	return nil
}

func envSnippet(language string, env map[string]string) string {
	b, _ := json.Marshal(env)
	switch language {
	case "python":
		return fmt.Sprintf("import os as __al_os, json as __al_json\n__al_os.environ.update(__al_json.loads(%q))\n", string(b))
	case "javascript", "typescript":
		return fmt.Sprintf("Object.assign(process.env, %s); undefined", string(b))
	case "bash":
		var sb strings.Builder
		for k, v := range env {
			if validEnvName(k) {
				fmt.Fprintf(&sb, "export %s=%s\n", k, shellQuote(v))
			}
		}
		return sb.String()
	case "r":
		return rGlobalEnvCode(env)
	case "java":
		return javaGlobalEnvCode(env)
	}
	return ""
}

// reseedPython reseeds Python's and (if imported) NumPy's global random
// generators from the kernel's entropy source.
const reseedPython = "import random as __al_random, sys as __al_sys\n__al_random.seed()\n" +
	"if 'numpy' in __al_sys.modules: __al_sys.modules['numpy'].random.seed()\n"

// syncGlobalEnv applies sandbox env vars that changed since the context was
// created (e.g. set by /init after the default contexts started).
func (s *Server) syncGlobalEnv(ctx context.Context, e *entry) {
	cur := s.st.EnvVars()
	if maps.Equal(cur, e.envApplied) {
		return
	}
	if jk, ok := e.kernel.(*jupyterKernel); ok && jk.flavor == nil {
		code := envSnippet("python", cur)
		if cur["E2B_SANDBOX_ID"] != e.envApplied["E2B_SANDBOX_ID"] {
			// A new sandbox identity: this kernel may be a restored copy
			// (fork, snapshot) whose random state every copy shares.
			code += reseedPython
		}
		jk.mu.Lock()
		err := jk.runSilent(ctx, code)
		jk.mu.Unlock()
		if err != nil {
			return
		}
	} else if err := e.kernel.Execute(ctx, envSnippet(e.Language, cur), nil, func(Output) {}); err != nil {
		return
	}
	e.envApplied = cur
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request, e *entry, req executeRequest) {
	if err := e.wait(r.Context()); err != nil {
		textError(w, http.StatusInternalServerError, err.Error())
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s.syncGlobalEnv(r.Context(), e)

	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	lw := &lineWriter{w: w, last: time.Now()}
	lw.flusher, _ = w.(http.Flusher)
	if lw.flusher != nil {
		// The status line goes out within headerDelay, with the
		// records when the cell is quick (one segment in all).
		lw.timer, lw.header = time.AfterFunc(headerDelay, lw.flush), true
	}
	stopKA := make(chan struct{})
	kaDone := make(chan struct{})
	go func() {
		defer close(kaDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopKA:
				return
			case <-t.C:
				if lw.idle() >= keepaliveEvery {
					lw.write(map[string]any{"type": "keepalive"})
				}
			}
		}
	}()
	var err error
	if jk, ok := e.kernel.(*jupyterKernel); ok && req.Silent {
		jk.mu.Lock()
		err = jk.runSilent(r.Context(), req.Code)
		jk.mu.Unlock()
	} else {
		err = e.kernel.Execute(r.Context(), req.Code, req.EnvVars, func(o Output) {
			if rec := outputRecord(o); rec != nil && !(req.Silent && o.Type == "result") {
				lw.write(rec)
			}
		})
	}
	close(stopKA)
	<-kaDone
	switch {
	case errors.Is(err, ErrAborted):
		lw.write(map[string]any{"type": "error", "name": "ExecutionAborted", "value": "Execution was aborted", "traceback": ""})
	case errors.Is(err, ErrDied):
		var de *DiedError
		if errors.As(err, &de) && de.OOM {
			lw.write(map[string]any{"type": "error", "name": "OutOfMemoryError",
				"value": "the kernel ran out of memory (the sandbox's memory limit) and was killed; the context was restarted and its state is lost", "traceback": ""})
			break
		}
		lw.write(map[string]any{"type": "error", "name": "ContextRestarting", "value": "Context was restarted: " + err.Error() + " during execution", "traceback": ""})
	case err != nil:
		lw.write(map[string]any{"type": "error", "name": "UnexpectedEndOfExecution", "value": err.Error(), "traceback": ""})
	}
	lw.write(map[string]any{"type": "end_of_execution"})
	lw.close()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) handleListContexts(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	out := make([]*entry, 0, len(s.contexts))
	for _, e := range s.contexts {
		out = append(out, e)
	}
	s.mu.Unlock()
	// Creation order: the defaults (registered at start) first, then the
	// user's contexts, as E2B lists them.
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleCreateContext(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Language *string `json:"language"`
		Cwd      *string `json:"cwd"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			textError(w, http.StatusBadRequest, "invalid request body: "+err.Error())
			return
		}
	}
	lang, cwd := "python", ""
	if req.Language != nil {
		lang = NormalizeLanguage(*req.Language)
	}
	if req.Cwd != nil {
		cwd = *req.Cwd
	}
	e, err := s.newContext(r.Context(), lang, cwd)
	if err != nil {
		if errors.Is(err, errUnsupported) || errors.Is(err, errBadCwd) {
			textError(w, http.StatusBadRequest, err.Error())
			return
		}
		if errors.Is(err, errTooManyContexts) {
			textError(w, http.StatusTooManyRequests, err.Error())
			return
		}
		textError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, e)
}

func (s *Server) lookup(id string) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contexts[id]
}

func (s *Server) handleDeleteContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	e := s.contexts[id]
	delete(s.contexts, id)
	for lang, d := range s.defaults {
		if d == e {
			delete(s.defaults, lang)
		}
	}
	s.mu.Unlock()
	if e == nil {
		textError(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", id))
		return
	}
	go closeWhenStarted(e)
	writeJSON(w, http.StatusOK, nil)
}

func (s *Server) handleRestartContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	e := s.lookup(id)
	if e == nil {
		textError(w, http.StatusNotFound, fmt.Sprintf("Context %s not found", id))
		return
	}
	if err := e.wait(r.Context()); err != nil {
		textError(w, http.StatusInternalServerError, err.Error())
		return
	}
	e.mu.Lock()
	err := e.kernel.Restart(r.Context())
	// The restarted kernel has the environment it was created with; force a
	// re-sync of the sandbox env vars on the next execution.
	e.envApplied = map[string]string{}
	e.mu.Unlock()
	if err != nil {
		textError(w, http.StatusInternalServerError, "restarting context: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, nil)
}
