package imagebuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/imagebuild/buildspec"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// ConfigKind marks template specs written by this package.
const ConfigKind = buildspec.Kind

// Config is what a Dockerfile template carries besides its files. It is
// recorded as the template's spec (JSON; its fields are in package
// buildspec, which readers of the spec import without this builder).
type Config buildspec.Config

// ParseConfig decodes a template spec written by Build; ok is false for
// other specs (built-in recipes).
func ParseConfig(spec string) (*Config, bool) {
	c, ok := buildspec.Parse(spec)
	return (*Config)(c), ok
}

// SandboxConfig converts c for the sandbox manager.
func (c *Config) SandboxConfig() sandbox.TemplateConfig {
	return sandbox.TemplateConfig{
		Env: c.Env, User: c.User, Workdir: c.Workdir, CPUCount: c.CPUCount, MemoryMB: c.MemoryMB,
		StartCmd: c.StartCmd, ReadyCmd: c.ReadyCmd,
	}
}

// Request is one Dockerfile build.
type Request struct {
	Name       string // template name to record
	Dockerfile []byte
	ContextDir string // extracted build context (host path)
	BuildArgs  map[string]string
	CPUCount   int
	MemoryMB   int
	StartCmd   string // overrides CMD/ENTRYPOINT
	ReadyCmd   string
	NoNetwork  bool // RUN steps without internet access
	NoCache    bool // ignore cached layers
	// RegistryUsername and RegistryPassword authenticate the pull of a FROM
	// image (basic auth); never recorded.
	RegistryUsername, RegistryPassword string
}

// Result describes a finished build.
type Result struct {
	Template *template.Template
	Config   *Config
	Steps    int
	Cached   int
	Duration time.Duration
}

// Event is one line of the build log.
type Event struct {
	Step    int    // 1-based instruction index; 0 for build-level lines
	Total   int    // number of instructions including FROM
	Kind    string // "step", "cached", "output", "done", "info"
	Message string
}

// Sandboxes is what the builder needs from the sandbox manager.
type Sandboxes interface {
	Create(ctx context.Context, req sandbox.CreateRequest) (*sandbox.Sandbox, error)
	Exec(ctx context.Context, id string, req sandbox.ExecRequest, out io.Writer) (int, error)
	Kill(ctx context.Context, id string) error
	Dir(id string) string
}

// Templates is what the builder needs from the template store.
type Templates interface {
	Get(ctx context.Context, name string) (*template.Template, error)
	Dir() string
	LayerPath(hash string) (string, bool)
	PublishLayer(tmp, hash string, size int64, spec string) error
	Register(ctx context.Context, name, hash, spec string) (*template.Template, error)
}

// LayerSource gives the builder the writes of a finished RUN step as an
// overlayfs-style upper directory (new and changed entries with their
// metadata, 0/0 character devices for deletions); it is runtime specific.
type LayerSource interface {
	// Upper is called once the step's command ended and the sandbox ran
	// sync, before the sandbox is destroyed. sandboxDir is the build
	// sandbox's runtime directory, lower the root filesystem it started
	// from. release (never nil when err is nil) frees what Upper made.
	Upper(ctx context.Context, sandboxDir, lower string) (upper string, release func(), err error)
}

// UpperDir is the LayerSource of a runtime that keeps the sandbox's writes
// in an overlay upper directory on the host (gVisor: gvisor.UpperDir).
type UpperDir func(sandboxDir string) string

// Upper implements LayerSource.
func (f UpperDir) Upper(_ context.Context, sandboxDir, _ string) (string, func(), error) {
	return f(sandboxDir), func() {}, nil
}

// Builder runs Dockerfile builds.
type Builder struct {
	sb     Sandboxes
	tpl    Templates
	layers LayerSource
	log    *slog.Logger
	// pull limits FROM; reg is its registry client (registry.go).
	pull PullConfig
	reg  *registryClient
}

// Option configures a Builder.
type Option func(*Builder)

// WithPull sets what FROM may read (PullConfig); without it, registry
// pulls refuse only the host's own, loopback and link-local addresses,
// and local images are refused.
func WithPull(c PullConfig) Option { return func(b *Builder) { b.pull = c } }

// New returns a Builder. layers reads a RUN step's writes from its build
// sandbox (UpperDir(gvisor.UpperDir), NewDiskSource for microVMs); nil
// makes Build answer 501.
func New(sb Sandboxes, tpl Templates, layers LayerSource, log *slog.Logger, opts ...Option) *Builder {
	if log == nil {
		log = slog.Default()
	}
	b := &Builder{sb: sb, tpl: tpl, layers: layers, log: log.With("component", "imagebuild")}
	for _, o := range opts {
		o(b)
	}
	b.reg = newRegistry(b.pull)
	return b
}

// userErr is a build error caused by the user's input.
func userErr(format string, args ...any) error {
	return &sandbox.Error{Code: http.StatusBadRequest, Msg: fmt.Sprintf(format, args...)}
}

// stepErr prefixes a user error with the Dockerfile line.
func stepErr(line int, text string, err error) error {
	if ue, ok := sandbox.AsUserError(err); ok {
		return &sandbox.Error{Code: ue.Code, Msg: fmt.Sprintf("Dockerfile line %d (%s): %s", line, text, ue.Msg)}
	}
	return fmt.Errorf("step at Dockerfile line %d (%s): %w", line, text, err)
}

func chain(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// lineWriter turns written bytes into output events, one per line.
type lineWriter struct {
	emit func(string)
	buf  []byte
	all  []string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

func (w *lineWriter) line(l string) {
	l = strings.TrimRight(l, "\r")
	w.all = append(w.all, l)
	if len(w.all) > 30 {
		w.all = w.all[len(w.all)-30:]
	}
	w.emit(l)
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.line(string(w.buf))
		w.buf = nil
	}
}
