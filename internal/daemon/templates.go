package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/imagebuild"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// sandboxTemplates adapts the template manager to sandbox.Templates.
type sandboxTemplates struct{ tm *template.Manager }

func (s sandboxTemplates) Resolve(ctx context.Context, name string) (*sandbox.Template, error) {
	t, err := s.tm.Get(ctx, name)
	if errors.Is(err, template.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrTemplateNotFound, err)
	}
	if errors.Is(err, artifacts.ErrUnavailable) {
		// Recorded, but the pull from --artifacts could not reach the store.
		return nil, &sandbox.Error{Code: http.StatusServiceUnavailable, Msg: err.Error()}
	}
	if err != nil {
		return nil, err
	}
	return &sandbox.Template{Name: t.Name, Hash: t.Hash, RootFS: t.RootFS, TemplateConfig: templateConfig(t)}, nil
}

// apiTemplates adapts the template manager to api.Templates.
type apiTemplates struct {
	tm      *template.Manager
	mgr     *sandbox.Manager
	builder *imagebuild.Builder
}

func toTemplateInfo(t *template.Template) api.TemplateInfo {
	cpu, mem, cfg := apiConfig(t)
	return api.TemplateInfo{Name: t.Name, Hash: t.Hash, SizeBytes: t.SizeBytes, CreatedAt: t.CreatedAt, CPUCount: cpu, MemoryMB: mem, Config: cfg}
}

func (a apiTemplates) List(ctx context.Context) ([]api.TemplateInfo, error) {
	ts, err := a.tm.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.TemplateInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, toTemplateInfo(t))
	}
	return out, nil
}

func (a apiTemplates) Build(ctx context.Context, name string, force bool, progress func(airlock.Progress)) (*api.TemplateInfo, error) {
	t, err := a.tm.Build(ctx, name, template.BuildOptions{Force: force}, func(p template.Progress) {
		progress(airlock.Progress{Phase: p.Phase, Message: p.Message, Done: p.Done, Total: p.Total})
	})
	if err != nil {
		return nil, err
	}
	gcTemplatesLater(a.tm, a.mgr)
	info := toTemplateInfo(t)
	return &info, nil
}

var _ api.TemplateAdmin = apiTemplates{}

// templateConfig returns the sandbox defaults recorded with a Dockerfile
// template (zero for built-in recipes).
func templateConfig(t *template.Template) sandbox.TemplateConfig {
	if c, ok := imagebuild.ParseConfig(t.Spec); ok {
		return c.SandboxConfig()
	}
	return sandbox.TemplateConfig{}
}

func apiConfig(t *template.Template) (int, int, *airlock.TemplateConfig) {
	c, ok := imagebuild.ParseConfig(t.Spec)
	if !ok {
		return 0, 0, nil
	}
	return c.CPUCount, c.MemoryMB, &airlock.TemplateConfig{
		From: c.From, Env: c.Env, User: c.User, Workdir: c.Workdir, Labels: c.Labels,
		StartCmd: c.StartCmd, ReadyCmd: c.ReadyCmd, Layers: c.Layers,
	}
}

// BuildDockerfile implements api.TemplateAdmin.
func (a apiTemplates) BuildDockerfile(ctx context.Context, name string, contextTar io.Reader, o airlock.DockerfileBuild, progress func(airlock.Progress)) (*api.TemplateInfo, error) {
	if _, err := template.LookupRecipe(name); err == nil {
		return nil, &sandbox.Error{Code: http.StatusBadRequest, Msg: fmt.Sprintf("%q is a built-in template name", name)}
	}
	defer a.tm.Hold()() // no template GC while layers are unreferenced
	dir, err := os.MkdirTemp(a.tm.Dir(), ".tmp-context-")
	if err != nil {
		return nil, fmt.Errorf("creating context dir: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := imagebuild.ExtractContext(contextTar, dir); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("opening context dir: %w", err)
	}
	df, err := root.ReadFile(strings.TrimPrefix(path.Clean("/"+o.Dockerfile), "/"))
	root.Close()
	if err != nil {
		return nil, &sandbox.Error{Code: http.StatusBadRequest, Msg: fmt.Sprintf("reading %s from the build context: %v", o.Dockerfile, err)}
	}
	res, err := a.builder.Build(ctx, imagebuild.Request{
		Name: name, Dockerfile: df, ContextDir: dir, BuildArgs: o.BuildArgs, CPUCount: o.CPUCount,
		MemoryMB: o.MemoryMB, StartCmd: o.StartCmd, ReadyCmd: o.ReadyCmd, NoNetwork: o.NoNetwork, NoCache: o.NoCache,
		RegistryUsername: o.RegistryUsername, RegistryPassword: o.RegistryPassword,
	}, func(e imagebuild.Event) {
		progress(airlock.Progress{Phase: e.Kind, Message: e.Message, Done: int64(e.Step), Total: int64(e.Total)})
	})
	if err != nil {
		return nil, err
	}
	gcTemplatesLater(a.tm, a.mgr)
	info := toTemplateInfo(res.Template)
	return &info, nil
}

// Info implements api.TemplateAdmin.
func (a apiTemplates) Info(ctx context.Context, name string) (*api.TemplateInfo, error) {
	t, err := a.tm.Get(ctx, name)
	if errors.Is(err, template.ErrNotFound) {
		return nil, &sandbox.Error{Code: http.StatusNotFound, Msg: fmt.Sprintf("template '%s' not found", name)}
	}
	if err != nil {
		return nil, err
	}
	info := toTemplateInfo(t)
	return &info, nil
}

// Remove implements api.TemplateAdmin.
func (a apiTemplates) Remove(ctx context.Context, name string) error {
	t, err := a.tm.Get(ctx, name)
	if errors.Is(err, template.ErrNotFound) {
		return &sandbox.Error{Code: http.StatusNotFound, Msg: fmt.Sprintf("template '%s' not found", name)}
	}
	if err != nil {
		return err
	}
	var users []string
	for _, s := range a.mgr.List() {
		if s.TemplateID == name || s.TemplateID == t.Hash {
			users = append(users, s.ID)
		}
	}
	if len(users) > 0 {
		return &sandbox.Error{Code: http.StatusConflict, Msg: fmt.Sprintf("template '%s' is in use by %d sandbox(es): %s", name, len(users), strings.Join(users, ", "))}
	}
	err = a.tm.Remove(ctx, name)
	if errors.Is(err, template.ErrBuiltin) {
		return &sandbox.Error{Code: http.StatusBadRequest, Msg: err.Error()}
	}
	return err
}
