//go:build linux

package imagebuild

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Image references accepted by FROM besides template names:
//
//	oci-layout:///abs/dir[:tag]           OCI image layout directory on the daemon host (inside --image-dir)
//	oci-layout:///abs/dir@sha256:<hex>    ... one manifest of it by digest
//	docker-archive:///abs/file.tar        `docker save` / OCI tarball on the daemon host (inside --image-dir)
//	[registry/]repo[:tag|@digest]         registry image (HTTPS; plain HTTP only for loopback; never to a
//	                                      denied address unless --registry-allow names it: registry.go)
const (
	schemeLayout  = "oci-layout://"
	schemeArchive = "docker-archive://"
)

// imageFixups versions what the builder adds to every image root
// filesystem; it is part of the base layer's hash.
const imageFixups = "v2"

var platform = v1.Platform{OS: "linux", Architecture: "amd64"}

// isImageRef reports whether from names an image rather than a template.
func isImageRef(from string) bool {
	return strings.HasPrefix(from, schemeLayout) || strings.HasPrefix(from, schemeArchive) ||
		strings.ContainsAny(from, "/:@")
}

// registryAuthKey carries the registry credentials of one build in its
// context (Request.RegistryUsername/RegistryPassword).
type registryAuthKey struct{}

// openImage resolves ref to a linux/amd64 image: a local image under
// PullConfig.ImageDir, or a registry image fetched through b.reg (denied
// destinations refused, no response body in an error).
func (b *Builder) openImage(ctx context.Context, ref string) (v1.Image, error) {
	switch {
	case strings.HasPrefix(ref, schemeLayout):
		return b.openLayout(strings.TrimPrefix(ref, schemeLayout))
	case strings.HasPrefix(ref, schemeArchive):
		p, err := b.localImagePath(ref, strings.TrimPrefix(ref, schemeArchive))
		if err != nil {
			return nil, err
		}
		img, err := tarball.ImageFromPath(p, nil)
		if err != nil {
			return nil, userErr("reading image archive %s: %v", p, err)
		}
		return img, nil
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, userErr("invalid image reference %q: %v", ref, err)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithPlatform(platform), remote.WithTransport(b.reg.transport)}
	if a, ok := ctx.Value(registryAuthKey{}).(authn.Authenticator); ok {
		opts = append(opts, remote.WithAuth(a))
	}
	img, err := remote.Image(r, opts...)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, pullErr("pulling image %s", []any{ref}, err)
	}
	return img, nil
}

// localImagePath checks that p, a local image path of ref, lies inside
// PullConfig.ImageDir (after resolving symlinks) and returns it resolved.
func (b *Builder) localImagePath(ref, p string) (string, error) {
	dir := b.pull.ImageDir
	if dir == "" {
		return "", userErr("%s: local images are turned off on this daemon (an operator turns them on with --image-dir)", ref)
	}
	if !filepath.IsAbs(p) {
		return "", userErr("%s: want an absolute path on the daemon host, inside %s", ref, dir)
	}
	outside := userErr("%s: local images must be inside %s (--image-dir)", ref, dir)
	if !within(dir, filepath.Clean(p)) {
		return "", outside
	}
	rdir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("resolving --image-dir: %w", err)
	}
	rp, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", userErr("%s: %v", ref, errors.Unwrap(err))
	}
	if !within(rdir, rp) {
		return "", outside
	}
	return rp, nil
}

// within reports whether p is dir or below it (both clean and absolute).
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// openLayout opens "/dir[:tag]" or "/dir@sha256:..." of an OCI layout.
func (b *Builder) openLayout(spec string) (v1.Image, error) {
	dir, digest, tag := spec, "", ""
	if i := strings.LastIndex(spec, "@"); i >= 0 {
		dir, digest = spec[:i], spec[i+1:]
	} else if i := strings.LastIndex(spec, ":"); i > strings.LastIndex(spec, "/") {
		dir, tag = spec[:i], spec[i+1:]
	}
	dir, err := b.localImagePath(schemeLayout+spec, dir)
	if err != nil {
		return nil, err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, userErr("reading OCI layout %s: %v", dir, err)
	}
	return pickImage(idx, digest, tag, dir)
}

// pickImage selects the manifest matching digest or tag (or the only one)
// and descends into nested indexes for linux/amd64.
func pickImage(idx v1.ImageIndex, digest, tag, where string) (v1.Image, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, userErr("reading index of %s: %v", where, err)
	}
	var cands []v1.Descriptor
	for _, d := range im.Manifests {
		switch {
		case digest != "":
			if d.Digest.String() == digest {
				cands = append(cands, d)
			}
		case tag != "":
			if d.Annotations["org.opencontainers.image.ref.name"] == tag {
				cands = append(cands, d)
			}
		default:
			if d.Platform == nil || d.Platform.OS == "" || d.Platform.Satisfies(platform) {
				cands = append(cands, d)
			}
		}
	}
	if len(cands) == 0 {
		return nil, userErr("%s: no image matches %q", where, digest+tag)
	}
	if len(cands) > 1 {
		return nil, userErr("%s holds %d images: name one with :tag or @sha256:…", where, len(cands))
	}
	d := cands[0]
	if d.MediaType.IsIndex() {
		sub, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, userErr("reading nested index %s: %v", d.Digest, err)
		}
		return pickImage(sub, "", "", where)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		return nil, userErr("reading image %s of %s: %v", d.Digest, where, err)
	}
	return img, nil
}

// imageBase makes (or finds) the base layer for the image and returns its
// hash and the image's configuration.
func (b *Builder) imageBase(ctx context.Context, ref string, emit func(string)) (string, *v1.Config, error) {
	img, err := b.openImage(ctx, ref)
	if err != nil {
		return "", nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return "", nil, pullErr("image %s", []any{ref}, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", nil, pullErr("image %s: reading config", []any{ref}, err)
	}
	if (cf.OS != "" && cf.OS != platform.OS) || (cf.Architecture != "" && cf.Architecture != platform.Architecture) {
		return "", nil, userErr("image %s is %s/%s; only linux/amd64 can run here", ref, cf.OS, cf.Architecture)
	}
	hash := chain("oci-image", digest.String(), imageFixups)
	if _, ok := b.tpl.LayerPath(hash); ok {
		emit(fmt.Sprintf("image %s (%s): cached", ref, digest))
		return hash, &cf.Config, nil
	}
	layers, err := img.Layers()
	if err != nil {
		return "", nil, pullErr("image %s: listing layers", []any{ref}, err)
	}
	// The compressed sizes the manifest declares, before fetching any.
	limit := b.maxImageBytes()
	var declared int64
	for _, l := range layers {
		if n, err := l.Size(); err == nil {
			declared += n
		}
	}
	if declared > limit {
		return "", nil, tooLarge(ref, limit)
	}
	emit(fmt.Sprintf("image %s (%s): unpacking %d layers", ref, digest, len(layers)))
	tmp, err := os.MkdirTemp(b.tpl.Dir(), ".tmp-")
	if err != nil {
		return "", nil, fmt.Errorf("creating layer dir: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", nil, err
	}
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return "", nil, err
	}
	a := newLayerApplier(rootfs)
	budget := &imageBudget{left: limit, ref: ref}
	for i, l := range layers {
		if err := applyImageLayer(a, l, budget); err != nil {
			return "", nil, fmt.Errorf("image layer %d: %w", i+1, err)
		}
	}
	if err := a.finish(); err != nil {
		return "", nil, err
	}
	glibc, err := fixupImageRoot(a)
	if err != nil {
		return "", nil, fmt.Errorf("preparing image root filesystem: %w", err)
	}
	spec := fmt.Sprintf(`{"kind":"image","ref":%q,"digest":%q,"glibc":%t}`, ref, digest, glibc)
	if err := b.tpl.PublishLayer(tmp, hash, 0, spec); err != nil {
		return "", nil, err
	}
	ok = true
	return hash, &cf.Config, nil
}

func applyImageLayer(a *layerApplier, l v1.Layer, budget *imageBudget) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return pullErr("opening layer", nil, err)
	}
	defer rc.Close()
	if err := a.apply(&budgetReader{r: rc, b: budget}); err != nil {
		if budget.left < 0 {
			return tooLarge(budget.ref, budget.limit())
		}
		return err
	}
	return nil
}

// imageBudget is what an image may still unpack to (uncompressed bytes).
type imageBudget struct {
	left, spent int64
	ref         string
}

func (b *imageBudget) limit() int64 { return b.left + b.spent }

// budgetReader fails once its budget is spent.
type budgetReader struct {
	r io.Reader
	b *imageBudget
}

func (r *budgetReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.b.left -= int64(n)
	r.b.spent += int64(n)
	if r.b.left < 0 {
		return n, errImageTooLarge
	}
	return n, err
}

var errImageTooLarge = errors.New("image too large")

func tooLarge(ref string, limit int64) error {
	return &sandbox.Error{Code: http.StatusRequestEntityTooLarge,
		Msg: fmt.Sprintf("image %s is larger than %d MiB, the most a template build may pull (an operator raises it with --max-image-mb)", ref, limit>>20)}
}

func (b *Builder) maxImageBytes() int64 {
	if b.pull.MaxImageBytes > 0 {
		return b.pull.MaxImageBytes
	}
	return DefaultMaxImageBytes
}

// fixupImageRoot makes an image root filesystem usable by the agent:
// /usr/local/bin and /tmp exist, root and a "user" account (uid 1000, home
// /home/user) exist. It reports whether the image uses glibc (part of the
// layer's recorded spec).
func fixupImageRoot(a *layerApplier) (bool, error) {
	for _, d := range []struct {
		rel  string
		mode os.FileMode
	}{{"usr/local/bin", 0o755}, {"etc", 0o755}, {"home", 0o755}, {"tmp", 0o1777 | os.ModeSticky}} {
		p, err := a.mkdirs(d.rel)
		if err != nil {
			return false, err
		}
		if d.rel == "tmp" {
			if err := os.Chmod(p, d.mode); err != nil {
				return false, err
			}
		}
	}
	// The agent resolves users in /etc/passwd: root and user must exist.
	if _, ok := lookupUser(a.root, "root"); !ok {
		if err := a.appendLine("etc/passwd", "root:x:0:0:root:/root:/bin/sh"); err != nil {
			return false, err
		}
	}
	if _, ok := lookupGroup(a.root, "root"); !ok {
		if err := a.appendLine("etc/group", "root:x:0:"); err != nil {
			return false, err
		}
	}
	if _, err := a.mkdirs("root"); err != nil {
		return false, err
	}
	if _, ok := lookupUser(a.root, "user"); !ok {
		if err := a.appendLine("etc/passwd", "user:x:1000:1000:user:/home/user:/bin/sh"); err != nil {
			return false, err
		}
	}
	if _, ok := lookupGroup(a.root, "user"); !ok {
		if err := a.appendLine("etc/group", "user:x:1000:"); err != nil {
			return false, err
		}
	}
	home, err := a.resolve("home/user")
	if err != nil {
		return false, err
	}
	if _, err := os.Lstat(home); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(home, 0o755); err != nil {
			return false, err
		}
		if err := os.Lchown(home, 1000, 1000); err != nil {
			return false, err
		}
	}
	return a.exists("lib64/ld-linux-x86-64.so.2") || a.exists("lib/x86_64-linux-gnu/libc.so.6"), nil
}

// exists reports whether rel exists in the root (following links inside it).
func (a *layerApplier) exists(rel string) bool {
	r, err := a.resolveDir(rel, 0)
	if err != nil {
		return false
	}
	_, err = os.Lstat(filepath.Join(a.root, r))
	return err == nil
}

// mkdirs creates rel (resolved inside the root) and returns its host path.
func (a *layerApplier) mkdirs(rel string) (string, error) {
	r, err := a.resolveDir(rel, 0)
	if err != nil {
		return "", err
	}
	p := filepath.Join(a.root, r)
	if err := os.MkdirAll(p, 0o755); err != nil {
		return "", fmt.Errorf("creating /%s: %w", rel, err)
	}
	return p, nil
}

// appendLine appends line to the regular file rel, creating it (0644).
func (a *layerApplier) appendLine(rel, line string) error {
	p, err := a.resolve(rel)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_APPEND|openNoFollow, 0o644)
	if err != nil {
		return fmt.Errorf("opening /%s: %w", rel, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, fi.Size()-1); err == nil && last[0] != '\n' {
			line = "\n" + line
		}
	}
	w := bufio.NewWriter(f)
	if _, err := io.WriteString(w, line+"\n"); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("writing /%s: %w", rel, err)
	}
	return nil
}

// fromImage starts the build state from an image: its base layer plus the
// configuration Docker would carry over (Env, WorkingDir, User, Cmd,
// Entrypoint; exec form).
func (b *Builder) fromImage(ctx context.Context, st *state, ref string, emit func(string)) error {
	hash, cfg, err := b.imageBase(ctx, ref, emit)
	if err != nil {
		return err
	}
	st.layer = hash
	for _, kv := range cfg.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			st.env.Set(k, v)
		}
	}
	st.workdir, st.user = cfg.WorkingDir, cfg.User
	st.cmd, st.cmdExec = slices.Clone(cfg.Cmd), true
	st.ep, st.epExec = slices.Clone(cfg.Entrypoint), true
	return nil
}
