//go:build linux

package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

var _ runtime.Cloner = (*Runtime)(nil)

// Clone implements runtime.Cloner: it prepares spec.Dir as a copy of the
// checkpointed (stopped) sandbox in parentDir. The writable layer image is
// copied with `cp --reflink=auto --sparse=always` while the parent's layer
// filesystem is frozen (FIFREEZE), so the copy is consistent and shares
// blocks with the parent on reflink-capable filesystems; then the layer and
// the overlay are mounted and a bundle for spec is written. Restore(spec,
// image) starts the child. On failure everything created is removed.
func (r *Runtime) Clone(ctx context.Context, parentDir string, spec runtime.Spec) error {
	parentDir = filepath.Clean(parentDir)
	return r.cloneWith(ctx, spec, parentDir, func(dir string) error {
		parentImg := filepath.Join(parentDir, diskImage)
		if _, err := os.Stat(parentImg); err != nil {
			// Unlimited layer: a plain directory tree.
			return copyTree(ctx, filepath.Join(parentDir, layerDir), filepath.Join(dir, layerDir))
		}
		img := filepath.Join(dir, diskImage)
		if err := copyFrozen(ctx, filepath.Join(parentDir, layerDir), parentImg, img); err != nil {
			return err
		}
		copyLayerBase(parentDir, dir)
		return mountImage(img, filepath.Join(dir, layerDir))
	})
}

var _ runtime.LayerSaver = (*Runtime)(nil)

// SaveLayer implements runtime.LayerSaver: disk.img is copied (reflink and
// sparse where possible) while the layer filesystem is frozen, or an
// unlimited layer's tree is copied into dst/layer.
func (r *Runtime) SaveLayer(ctx context.Context, dir, dst string) error {
	dir, dst = filepath.Clean(dir), filepath.Clean(dst)
	if dst == dir || strings.HasPrefix(dst, dir+"/") {
		return fmt.Errorf("%w: snapshot dir %s is inside the sandbox dir", ErrInvalidSpec, dst)
	}
	img := filepath.Join(dir, diskImage)
	if _, err := os.Stat(img); err != nil {
		layer := filepath.Join(dst, layerDir)
		if err := os.Mkdir(layer, 0o700); err != nil {
			return fmt.Errorf("creating saved layer dir: %w", err)
		}
		if err := copyTree(ctx, filepath.Join(dir, layerDir), layer); err != nil {
			return err
		}
		return copyBundle(dir, dst)
	}
	if err := copyFrozen(ctx, filepath.Join(dir, layerDir), img, filepath.Join(dst, diskImage)); err != nil {
		return err
	}
	copyLayerBase(dir, dst)
	return copyBundle(dir, dst)
}

// copyBundle copies the OCI spec of the sandbox in dir next to its saved
// layer in dst, so that sandboxes restored from there get the same process
// limits (see inheritSpec).
func copyBundle(dir, dst string) error {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return fmt.Errorf("reading the sandbox's OCI spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dst, "config.json"), b, 0o600); err != nil {
		return fmt.Errorf("saving the sandbox's OCI spec: %w", err)
	}
	return nil
}

// inheritSpec gives s, the spec of a sandbox restored from the checkpoint of
// the sandbox whose bundle is in from, that sandbox's rlimits and host pids
// guard. runsc refuses a restore whose rlimits differ from the checkpointed
// spec (restore spec validation), and they are the restored processes'
// limits anyway. A source without a bundle (a snapshot saved before
// bundles were kept) leaves s as it is.
func inheritSpec(from string, s *specs.Spec) {
	b, err := os.ReadFile(filepath.Join(from, "config.json"))
	if err != nil {
		return
	}
	var src specs.Spec
	if json.Unmarshal(b, &src) != nil || src.Process == nil {
		return
	}
	s.Process.Rlimits = src.Process.Rlimits
	if src.Linux != nil && src.Linux.Resources != nil && src.Linux.Resources.Pids != nil {
		s.Linux.Resources.Pids = src.Linux.Resources.Pids
	}
}

// CloneSaved implements runtime.LayerSaver: like Clone, from a layer saved
// by SaveLayer (a plain copy: nothing there is mounted or in use).
func (r *Runtime) CloneSaved(ctx context.Context, src string, spec runtime.Spec) error {
	src = filepath.Clean(src)
	return r.cloneWith(ctx, spec, src, func(dir string) error {
		saved := filepath.Join(src, diskImage)
		if _, err := os.Stat(saved); err != nil {
			return copyTree(ctx, filepath.Join(src, layerDir), filepath.Join(dir, layerDir))
		}
		img := filepath.Join(dir, diskImage)
		out, err := helperenv.Command(ctx, "cp", "--reflink=auto", "--sparse=always", saved, img).CombinedOutput()
		if err != nil {
			return fmt.Errorf("copying saved layer image: %w: %s", err, strings.TrimSpace(string(out)))
		}
		copyLayerBase(src, dir)
		return mountImage(img, filepath.Join(dir, layerDir))
	})
}

var _ runtime.LayerTaker = (*Runtime)(nil)

// TakeSaved implements runtime.LayerTaker: CloneSaved, with the saved
// disk.img renamed into spec.Dir rather than copied (copied when the
// rename fails, e.g. across file systems).
func (r *Runtime) TakeSaved(ctx context.Context, src string, spec runtime.Spec) error {
	src = filepath.Clean(src)
	saved := filepath.Join(src, diskImage)
	if _, err := os.Stat(saved); err != nil {
		return r.CloneSaved(ctx, src, spec)
	}
	return r.cloneWith(ctx, spec, src, func(dir string) error {
		img := filepath.Join(dir, diskImage)
		if err := os.Rename(saved, img); err != nil {
			out, cerr := helperenv.Command(ctx, "cp", "--reflink=auto", "--sparse=always", saved, img).CombinedOutput()
			if cerr != nil {
				return fmt.Errorf("copying saved layer image: %w: %s", cerr, strings.TrimSpace(string(out)))
			}
		}
		copyLayerBase(src, dir)
		return mountImage(img, filepath.Join(dir, layerDir))
	})
}

// cloneWith creates spec.Dir with an empty layer dir, lets fill populate
// (and mount) the writable layer, then mounts the overlay and writes the
// bundle, with the process limits of the bundle in from. On failure
// everything created is removed.
func (r *Runtime) cloneWith(ctx context.Context, spec runtime.Spec, from string, fill func(dir string) error) (err error) {
	if err := validate(spec); err != nil {
		return err
	}
	dir := filepath.Clean(spec.Dir)
	if r.known(spec.ID) {
		return fmt.Errorf("%w: sandbox %s already exists in runsc", ErrInvalidSpec, spec.ID)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("creating sandbox dir: %w", err)
	}
	t0 := time.Now()
	var undo runtime.Cleanup
	defer undo.Unwind(ctx, &err)
	undo.Push(r.destroyStep("clone", spec.ID, dir))
	if err := os.Mkdir(filepath.Join(dir, layerDir), 0o700); err != nil {
		return fmt.Errorf("creating layer dir: %w", err)
	}
	if err := fill(dir); err != nil {
		return err
	}
	copied := time.Since(t0)
	if err := mountOverlay(filepath.Clean(spec.RootFS), dir); err != nil {
		return err
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}
	if err := writeGuestFiles(RootfsDir(dir), spec, hostname); err != nil {
		return err
	}
	bundle := buildSpec(spec, RootfsDir(dir), effectiveLimits(spec.Resources, r.diskMB), r.cgroupsPath(spec.ID))
	inheritSpec(from, bundle)
	if err := writeBundle(dir, bundle); err != nil {
		return err
	}
	r.log.Debug("sandbox cloned", "id", spec.ID, "copy", copied, "total", time.Since(t0))
	return nil
}

// copyTree copies the contents of src into the existing directory dst.
func copyTree(ctx context.Context, src, dst string) error {
	out, err := helperenv.Command(ctx, "cp", "-a", "--reflink=auto", src+"/.", dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copying layer: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// copyLayerBase copies the layer's base usage record (stats), if any.
func copyLayerBase(from, to string) {
	if b, err := os.ReadFile(filepath.Join(from, layerBase)); err == nil {
		_ = os.WriteFile(filepath.Join(to, layerBase), b, 0o600)
	}
}

// copyFrozen copies the image backing the filesystem mounted at mnt while
// that filesystem is frozen (all dirty data written, writes blocked).
func copyFrozen(ctx context.Context, mnt, src, dst string) error {
	f, err := os.Open(mnt)
	if err != nil {
		return fmt.Errorf("opening parent layer: %w", err)
	}
	defer f.Close()
	// A freeze left behind by a daemon killed during an earlier copy
	// would make FIFREEZE fail with EBUSY (and the thaw below end it).
	_ = unix.IoctlSetInt(int(f.Fd()), fiThaw, 0)
	frozen := unix.IoctlSetInt(int(f.Fd()), fiFreeze, 0) == nil
	if !frozen {
		// Not a mount (or no freeze support): at least flush it.
		if err := unix.Syncfs(int(f.Fd())); err != nil {
			return fmt.Errorf("syncing parent layer: %w", err)
		}
	}
	out, cerr := helperenv.Command(ctx, "cp", "--reflink=auto", "--sparse=always", src, dst).CombinedOutput()
	if frozen {
		if err := unix.IoctlSetInt(int(f.Fd()), fiThaw, 0); err != nil {
			cerr = errors.Join(cerr, fmt.Errorf("thawing parent layer: %w", err))
		}
	}
	if cerr != nil {
		return fmt.Errorf("copying layer image: %w: %s", cerr, strings.TrimSpace(string(out)))
	}
	return nil
}

// thawLayer ends a freeze of the layer filesystem mounted at dir/layer, if
// any, and reports whether there was one. copyFrozen freezes the layer of
// a stopped sandbox while it copies the image; a daemon SIGKILLed in that
// window leaves it frozen, and a sandbox restored on it then blocks on its
// first write to disk (seen with a fork parent after such a kill).
func thawLayer(dir string) (bool, error) {
	mnt := filepath.Join(dir, layerDir)
	if !isMountPoint(mnt) {
		return false, nil
	}
	f, err := os.Open(mnt)
	if err != nil {
		return false, fmt.Errorf("opening layer: %w", err)
	}
	defer f.Close()
	switch err := unix.IoctlSetInt(int(f.Fd()), fiThaw, 0); {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EINVAL): // not frozen
		return false, nil
	default:
		return false, fmt.Errorf("thawing layer: %w", err)
	}
}

// FIFREEZE/FITHAW ioctls (_IOWR('X', 119/120, int)); not in x/sys/unix.
const (
	fiFreeze = 0xc0045877
	fiThaw   = 0xc0045878
)
