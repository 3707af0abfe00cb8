//go:build linux

package imagebuild

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"

	"github.com/airlock-sandbox/airlock/internal/dockerfile"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// outcome is how a step was served.
type outcome int

const (
	outBuilt  outcome = iota // a new layer was made
	outCached                // the layer came from the cache
	outConfig                // the instruction only changes the configuration
)

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// state is the build state between instructions.
type state struct {
	layer   string // hash of the current root filesystem
	rootfs  string
	key     string // cache chain key (layer + config state)
	env     *dockerfile.Env
	args    *dockerfile.Env
	user    string
	workdir string
	shell   []string
	labels  map[string]string
	cmd     []string
	cmdExec bool
	ep      []string
	epExec  bool
	layers  []string
}

func (s *state) expandEnv() *dockerfile.Env { return s.args.Merged(s.env) }

// Build runs req, reporting progress through emit (may be nil).
func (b *Builder) Build(ctx context.Context, req Request, emit func(Event)) (*Result, error) {
	if emit == nil {
		emit = func(Event) {}
	}
	if b.layers == nil {
		return nil, &sandbox.Error{Code: http.StatusNotImplemented,
			Msg: "Dockerfile template builds are not supported by this daemon's isolation runtime"}
	}
	begin := time.Now()
	if req.RegistryUsername != "" {
		ctx = context.WithValue(ctx, registryAuthKey{}, &authn.Basic{Username: req.RegistryUsername, Password: req.RegistryPassword})
	}
	f, err := dockerfile.Parse(bytes.NewReader(req.Dockerfile))
	if err != nil {
		return nil, userErr("%v", err)
	}
	bctx, err := openContext(req.ContextDir)
	if err != nil {
		return nil, err
	}
	defer bctx.close()
	total := len(f.Commands) + 1
	st := &state{env: dockerfile.NewEnv(), args: dockerfile.NewEnv(), shell: []string{"/bin/sh", "-c"}, labels: map[string]string{}}
	// ARGs before FROM are only usable in FROM.
	meta := dockerfile.NewEnv()
	for _, a := range f.MetaArgs {
		for _, kv := range a.Args {
			v, ok := req.BuildArgs[kv.Key]
			if !ok {
				v = kv.ValueString()
			}
			meta.Set(kv.Key, v)
		}
	}
	from, err := dockerfile.ExpandWord(f.From, f.Escape, meta)
	if err != nil {
		return nil, userErr("Dockerfile line %d: FROM: %v", f.FromLine, err)
	}
	emit(Event{Step: 1, Total: total, Kind: "step", Message: fmt.Sprintf("[1/%d] FROM %s", total, from)})
	if from == "scratch" {
		st.layer = chain("scratch")
		if err := b.ensureScratch(st.layer); err != nil {
			return nil, err
		}
	} else {
		t, err := b.tpl.Get(ctx, from)
		if errors.Is(err, template.ErrNotFound) && isImageRef(from) {
			if err := b.fromImage(ctx, st, from, func(msg string) {
				emit(Event{Step: 1, Total: total, Kind: "info", Message: msg})
			}); err != nil {
				return nil, stepErr(f.FromLine, "FROM "+from, err)
			}
		} else if errors.Is(err, template.ErrNotFound) {
			return nil, userErr("Dockerfile line %d: FROM %s: no such template (use a built-in or earlier template name, scratch, or an image reference: registry/repo:tag, oci-layout:///dir[:tag], docker-archive:///file.tar)", f.FromLine, from)
		} else if err != nil {
			return nil, fmt.Errorf("resolving FROM %s: %w", from, err)
		} else {
			st.layer = t.Hash
			if c, ok := ParseConfig(t.Spec); ok {
				st.layers = slices.Clone(c.Layers)
				for _, k := range slices.Sorted(maps.Keys(c.Env)) {
					st.env.Set(k, c.Env[k])
				}
				st.user, st.workdir = c.User, c.Workdir
			}
		}
	}
	p, ok := b.tpl.LayerPath(st.layer)
	if !ok {
		return nil, fmt.Errorf("base layer %s is missing", st.layer)
	}
	st.rootfs = p
	st.key = chain("from", st.layer)
	st.layers = append(st.layers, st.layer)
	cached, configOnly := 0, 0
	for i, c := range f.Commands {
		n := i + 2
		line := dockerfile.Line(c)
		text := c.(fmt.Stringer).String()
		emit(Event{Step: n, Total: total, Kind: "step", Message: fmt.Sprintf("[%d/%d] %s", n, total, text)})
		stepStart := time.Now()
		out, err := b.step(ctx, req, bctx, st, c, f.Escape, func(k, msg string) {
			emit(Event{Step: n, Total: total, Kind: k, Message: msg})
		})
		if err != nil {
			return nil, stepErr(line, text, err)
		}
		switch out {
		case outConfig:
			configOnly++
		case outCached:
			cached++
			emit(Event{Step: n, Total: total, Kind: "cached", Message: fmt.Sprintf("[%d/%d] CACHED", n, total)})
		default:
			emit(Event{Step: n, Total: total, Kind: "done", Message: fmt.Sprintf("[%d/%d] DONE %.1fs", n, total, time.Since(stepStart).Seconds())})
		}
	}
	cfg := &Config{
		Kind: ConfigKind, From: from, Env: map[string]string{}, User: userName(st.user), Workdir: st.workdir,
		Labels: st.labels, CPUCount: req.CPUCount, MemoryMB: req.MemoryMB, ReadyCmd: req.ReadyCmd, Layers: st.layers,
	}
	for _, kv := range st.env.List() {
		k, v, _ := strings.Cut(kv, "=")
		cfg.Env[k] = v
	}
	cfg.StartCmd = req.StartCmd
	if cfg.StartCmd == "" {
		cfg.StartCmd = startCommand(st)
	}
	spec, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding template config: %w", err)
	}
	t, err := b.tpl.Register(ctx, req.Name, st.layer, string(spec))
	if err != nil {
		return nil, err
	}
	res := &Result{Template: t, Config: cfg, Steps: len(f.Commands) - configOnly, Cached: cached, Duration: time.Since(begin)}
	emit(Event{Total: total, Kind: "info", Message: fmt.Sprintf("template %s built: layer %s, %d of %d filesystem steps cached, %.1fs",
		req.Name, short(st.layer), cached, len(f.Commands)-configOnly, res.Duration.Seconds())})
	return res, nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// userName is the user part of a USER value.
func userName(u string) string {
	name, _, _ := strings.Cut(u, ":")
	return name
}

// shellQuote quotes args for /bin/sh.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// startCommand derives the start command from ENTRYPOINT and CMD.
func startCommand(st *state) string {
	part := func(args []string, exec bool) string {
		if exec {
			return shellQuote(args)
		}
		return strings.Join(args, " ")
	}
	switch {
	case len(st.ep) > 0 && !st.epExec:
		return part(st.ep, false) // shell-form ENTRYPOINT ignores CMD
	case len(st.ep) > 0:
		s := part(st.ep, true)
		if len(st.cmd) > 0 {
			s += " " + part(st.cmd, st.cmdExec)
		}
		return s
	case len(st.cmd) > 0:
		return part(st.cmd, st.cmdExec)
	}
	return ""
}

// step executes one instruction and reports how it was served.
func (b *Builder) step(ctx context.Context, req Request, bctx *buildContext, st *state, c instructions.Command, escape rune, emit func(kind, msg string)) (outcome, error) {
	if err := dockerfile.Expand(c, escape, st.expandEnv()); err != nil {
		return outBuilt, err
	}
	switch c := c.(type) {
	case *instructions.EnvCommand:
		for _, kv := range c.Env {
			st.env.Set(kv.Key, kv.Value)
		}
		st.key = chain(st.key, "env", strings.Join(st.env.List(), "\x00"))
		return outConfig, nil
	case *instructions.ArgCommand:
		for _, kv := range c.Args {
			v, ok := req.BuildArgs[kv.Key]
			if !ok {
				v = kv.ValueString()
			}
			st.args.Set(kv.Key, v)
		}
		st.key = chain(st.key, "arg", strings.Join(st.args.List(), "\x00"))
		return outConfig, nil
	case *instructions.LabelCommand:
		for _, kv := range c.Labels {
			st.labels[kv.Key] = kv.Value
		}
		return outConfig, nil
	case *instructions.UserCommand:
		st.user = c.User
		st.key = chain(st.key, "user", c.User)
		return outConfig, nil
	case *instructions.ShellCommand:
		st.shell = slices.Clone(c.Shell)
		st.key = chain(st.key, "shell", strings.Join(c.Shell, "\x00"))
		return outConfig, nil
	case *instructions.CmdCommand:
		st.cmd, st.cmdExec = slices.Clone(c.CmdLine), !c.PrependShell
		return outConfig, nil
	case *instructions.EntrypointCommand:
		st.ep, st.epExec = slices.Clone(c.CmdLine), !c.PrependShell
		if !c.PrependShell || len(c.CmdLine) == 0 {
			// Docker resets CMD when ENTRYPOINT is set.
			st.cmd = nil
		}
		return outConfig, nil
	case *instructions.WorkdirCommand:
		return b.workdir(ctx, req, st, c.Path)
	case *instructions.CopyCommand:
		return b.copy(ctx, req, bctx, st, c.SourcePaths, c.DestPath, c.Chown, c.Chmod)
	case *instructions.AddCommand:
		return b.copy(ctx, req, bctx, st, c.SourcePaths, c.DestPath, c.Chown, c.Chmod)
	case *instructions.RunCommand:
		return b.run(ctx, req, st, c, emit)
	}
	return outBuilt, userErr("instruction %s is not supported", c.Name())
}

func (b *Builder) absPath(st *state, p string) string {
	if path.IsAbs(p) {
		return p
	}
	wd := st.workdir
	if wd == "" {
		wd = "/"
	}
	return path.Join(wd, p)
}

func (b *Builder) workdir(ctx context.Context, req Request, st *state, p string) (outcome, error) {
	st.workdir = path.Clean(b.absPath(st, p))
	st.key = chain(st.key, "workdir", st.workdir)
	ok, err := existsIn(st.rootfs, st.workdir)
	if err != nil || ok {
		return outConfig, err
	}
	own := &owner{}
	if st.user != "" {
		o, err := resolveOwner(st.rootfs, st.user)
		if err != nil {
			return outBuilt, err
		}
		own = o
	}
	return b.layer(req, st, chain(st.key, "mkdir"), func(rootfs string) error {
		root, err := os.OpenRoot(rootfs)
		if err != nil {
			return err
		}
		defer root.Close()
		return mkdirAllOwned(root, strings.TrimPrefix(st.workdir, "/"), own.uid, own.gid)
	})
}

func (b *Builder) copy(ctx context.Context, req Request, bctx *buildContext, st *state, srcs []string, dest, chown, chmod string) (outcome, error) {
	dest = b.absPath(st, dest)
	if strings.HasSuffix(dest, "/") || dest == "/" {
		dest = strings.TrimSuffix(dest, "/") + "/"
	}
	items, err := bctx.resolveCopy(srcs, dest)
	if err != nil {
		return outBuilt, err
	}
	sum, err := bctx.hashItems(items)
	if err != nil {
		return outBuilt, err
	}
	var own *owner
	if chown != "" {
		if own, err = resolveOwner(st.rootfs, chown); err != nil {
			return outBuilt, err
		}
	}
	var mode fs.FileMode
	if chmod != "" {
		m, err := strconv.ParseUint(chmod, 8, 32)
		if err != nil || m > 0o7777 {
			return outBuilt, userErr("--chmod %q: want an octal mode", chmod)
		}
		mode = fs.FileMode(m & 0o777)
	}
	key := chain(st.key, "copy", dest, chown, chmod, sum)
	return b.layer(req, st, key, func(rootfs string) error {
		return copyInto(bctx, rootfs, items, own, mode)
	})
}

// layer produces (or finds in the cache) the layer key on top of st and
// makes it current. fill changes a clone of the parent.
func (b *Builder) layer(req Request, st *state, key string, fill func(rootfs string) error) (outcome, error) {
	if p, ok := b.tpl.LayerPath(key); ok && !req.NoCache {
		st.layer, st.rootfs, st.key = key, p, chain(key)
		st.layers = append(st.layers, key)
		return outCached, nil
	}
	tmp, err := os.MkdirTemp(b.tpl.Dir(), ".tmp-")
	if err != nil {
		return outBuilt, fmt.Errorf("creating layer dir: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return outBuilt, err
	}
	rootfs := filepath.Join(tmp, "rootfs")
	if err := cloneTree(st.rootfs, rootfs); err != nil {
		return outBuilt, err
	}
	if err := fill(rootfs); err != nil {
		return outBuilt, err
	}
	if err := b.tpl.PublishLayer(tmp, key, 0, `{"kind":"layer","parent":"`+st.layer+`"}`); err != nil {
		return outBuilt, err
	}
	ok = true
	p, found := b.tpl.LayerPath(key)
	if !found {
		return outBuilt, fmt.Errorf("layer %s vanished after publishing", key)
	}
	st.layer, st.rootfs, st.key = key, p, chain(key)
	st.layers = append(st.layers, key)
	return outBuilt, nil
}

func (b *Builder) run(ctx context.Context, req Request, st *state, c *instructions.RunCommand, emit func(kind, msg string)) (outcome, error) {
	args := slices.Clone(c.CmdLine)
	if c.PrependShell {
		args = append(slices.Clone(st.shell), strings.Join(c.CmdLine, " "))
	}
	if len(args) == 0 {
		return outBuilt, userErr("empty RUN")
	}
	env := st.expandEnv()
	envMap := map[string]string{}
	for _, kv := range env.List() {
		k, v, _ := strings.Cut(kv, "=")
		envMap[k] = v
	}
	if _, ok := envMap["PATH"]; !ok {
		envMap["PATH"] = defaultPath
	}
	user := "root"
	if st.user != "" {
		pe, ok := lookupUser(st.rootfs, userName(st.user))
		if !ok || pe.name == "" {
			return outBuilt, userErr("USER %q does not exist in the image", st.user)
		}
		user = pe.name
	}
	wd := st.workdir
	if wd == "" {
		wd = "/"
	}
	key := chain(st.key, "run", strings.Join(args, "\x00"), strings.Join(env.List(), "\x00"), user, wd)
	return b.layer(req, st, key, func(rootfs string) error {
		return b.runInSandbox(ctx, req, st.rootfs, rootfs, sandbox.ExecRequest{Args: args, User: user, Cwd: wd, Env: envMap}, emit)
	})
}

// runInSandbox runs ex in a sandbox over parent and applies the sandbox's
// writes onto dst (a clone of parent).
func (b *Builder) runInSandbox(ctx context.Context, req Request, parent, dst string, ex sandbox.ExecRequest, emit func(kind, msg string)) error {
	allow := !req.NoNetwork
	sb, err := b.sb.Create(ctx, sandbox.CreateRequest{
		TemplateID:    "build-" + req.Name,
		RootFS:        parent,
		Timeout:       2 * time.Hour,
		AllowInternet: &allow,
		Metadata:      map[string]string{sandbox.BuildKey: req.Name},
	})
	if err != nil {
		return fmt.Errorf("starting build sandbox: %w", err)
	}
	defer func() {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := b.sb.Kill(kctx, sb.ID); err != nil {
			b.log.Warn("killing build sandbox", "sandbox", sb.ID, "err", err)
		}
	}()
	lw := &lineWriter{emit: func(l string) { emit("output", l) }}
	code, err := b.sb.Exec(ctx, sb.ID, ex, lw)
	lw.flush()
	if err != nil {
		return fmt.Errorf("running in build sandbox: %w", err)
	}
	if code != 0 {
		return userErr("the command returned a non-zero code: %d; last output:\n%s", code, strings.Join(lw.all, "\n"))
	}
	// Flush the sandbox kernel's caches to the host before reading its layer.
	// The agent does it (the image may have no sync(1)).
	if _, err := b.sb.Exec(ctx, sb.ID, sandbox.ExecRequest{Args: []string{runtime.AgentGuestPath, "-sync"}, User: "root"}, nil); err != nil {
		b.log.Warn("sync in build sandbox", "sandbox", sb.ID, "err", err)
	}
	upper, release, err := b.layers.Upper(ctx, b.sb.Dir(sb.ID), parent)
	if err != nil {
		return fmt.Errorf("reading the step's changes: %w", err)
	}
	defer release()
	if err := applyUpper(upper, dst); err != nil {
		return fmt.Errorf("applying the step's changes: %w", err)
	}
	return nil
}

// ensureScratch creates the empty root filesystem layer.
func (b *Builder) ensureScratch(hash string) error {
	if _, ok := b.tpl.LayerPath(hash); ok {
		return nil
	}
	tmp, err := os.MkdirTemp(b.tpl.Dir(), ".tmp-")
	if err != nil {
		return fmt.Errorf("creating layer dir: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	for _, d := range []string{"rootfs", "rootfs/tmp", "rootfs/etc", "rootfs/usr/local/bin"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(tmp, "rootfs/tmp"), 0o1777|fs.ModeSticky); err != nil {
		return err
	}
	return b.tpl.PublishLayer(tmp, hash, 0, `{"kind":"layer","parent":"scratch"}`)
}
