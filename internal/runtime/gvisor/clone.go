//go:build linux

package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

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
func (r *Runtime) Clone(ctx context.Context, parentDir string, spec runtime.Spec) (err error) {
	if err := validate(spec); err != nil {
		return err
	}
	parentDir = filepath.Clean(parentDir)
	dir := filepath.Clean(spec.Dir)
	if r.known(spec.ID) {
		return fmt.Errorf("%w: sandbox %s already exists in runsc", ErrInvalidSpec, spec.ID)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("creating sandbox dir: %w", err)
	}
	t0 := time.Now()
	defer func() {
		if err == nil {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := r.Destroy(cctx, spec.ID, dir); derr != nil {
			r.log.Error("cleaning up failed clone", "id", spec.ID, "err", derr)
		}
	}()
	layer := filepath.Join(dir, layerDir)
	if err := os.Mkdir(layer, 0o700); err != nil {
		return fmt.Errorf("creating layer dir: %w", err)
	}
	parentImg := filepath.Join(parentDir, diskImage)
	if _, err := os.Stat(parentImg); err == nil {
		img := filepath.Join(dir, diskImage)
		if err := copyFrozen(ctx, filepath.Join(parentDir, layerDir), parentImg, img); err != nil {
			return err
		}
		if err := mountImage(img, layer); err != nil {
			return err
		}
		if b, err := os.ReadFile(filepath.Join(parentDir, layerBase)); err == nil {
			_ = os.WriteFile(filepath.Join(dir, layerBase), b, 0o600)
		}
	} else {
		// Unlimited layer: a plain directory tree.
		out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", filepath.Join(parentDir, layerDir)+"/.", layer).CombinedOutput()
		if err != nil {
			return fmt.Errorf("copying layer: %w: %s", err, strings.TrimSpace(string(out)))
		}
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
	if err := writeBundle(dir, buildSpec(spec, RootfsDir(dir), effectiveLimits(spec.Resources, r.diskMB))); err != nil {
		return err
	}
	r.log.Debug("sandbox cloned", "id", spec.ID, "copy", copied, "total", time.Since(t0))
	return nil
}

// copyFrozen copies the image backing the filesystem mounted at mnt while
// that filesystem is frozen (all dirty data written, writes blocked).
func copyFrozen(ctx context.Context, mnt, src, dst string) error {
	f, err := os.Open(mnt)
	if err != nil {
		return fmt.Errorf("opening parent layer: %w", err)
	}
	defer f.Close()
	frozen := unix.IoctlSetInt(int(f.Fd()), fiFreeze, 0) == nil
	if !frozen {
		// Not a mount (or no freeze support): at least flush it.
		if err := unix.Syncfs(int(f.Fd())); err != nil {
			return fmt.Errorf("syncing parent layer: %w", err)
		}
	}
	out, cerr := exec.CommandContext(ctx, "cp", "--reflink=auto", "--sparse=always", src, dst).CombinedOutput()
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

// FIFREEZE/FITHAW ioctls (_IOWR('X', 119/120, int)); not in x/sys/unix.
const (
	fiFreeze = 0xc0045877
	fiThaw   = 0xc0045878
)
