//go:build linux

package imagebuild

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
)

// DiskExporter is what a VM runtime offers the builder (microvm.Runtime).
type DiskExporter interface {
	// ExportRootDisk stops the VM of the sandbox in dir and writes its
	// root disk as a checked raw ext4 image to dst; base is the pristine
	// image the VM's disk started from.
	ExportRootDisk(ctx context.Context, dir, dst string) (base string, err error)
}

// DiskSource is the LayerSource of a VM runtime: the sandbox's writes
// live in its virtual disk, not in a host directory. After a step the VM
// is stopped, its disk exported to a raw image (see DiskExporter), and
// that image and the pristine base image are mounted read-only (nosuid,
// nodev, noexec) in the sandbox's dir; diffTrees turns the difference into
// an upper directory. Both are the same ext4 file system before and after
// the step, so untouched files keep inode and ctime: unlike a comparison
// with the host's layer tree this does not depend on mkfs.ext4 -d keeping
// times exactly (it drops the nanoseconds).
type DiskSource struct {
	vm  DiskExporter
	log *slog.Logger
}

// NewDiskSource returns the LayerSource for the VM runtime vm.
func NewDiskSource(vm DiskExporter, log *slog.Logger) *DiskSource {
	if log == nil {
		log = slog.Default()
	}
	return &DiskSource{vm: vm, log: log}
}

// Upper implements LayerSource.
func (s *DiskSource) Upper(ctx context.Context, sandboxDir, _ string) (upper string, _ func(), err error) {
	t0 := time.Now()
	work, err := os.MkdirTemp(sandboxDir, "layer-")
	if err != nil {
		return "", nil, fmt.Errorf("creating layer work dir: %w", err)
	}
	var mounts []string
	release := func() {
		for _, m := range mounts {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
				s.log.Warn("unmounting a build layer image", "mount", m, "err", err)
			}
		}
		if err := os.RemoveAll(work); err != nil {
			s.log.Warn("removing layer work dir", "dir", work, "err", err)
		}
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	disk := filepath.Join(work, "disk.raw")
	base, err := s.vm.ExportRootDisk(ctx, sandboxDir, disk)
	if err != nil {
		return "", nil, err
	}
	exported := time.Since(t0)
	oldDir, curDir := filepath.Join(work, "old"), filepath.Join(work, "cur")
	upper = filepath.Join(work, "upper")
	for _, m := range []struct{ img, dir string }{{base, oldDir}, {disk, curDir}} {
		if err := os.Mkdir(m.dir, 0o700); err != nil {
			return "", nil, err
		}
		if err := mountImage(ctx, m.img, m.dir); err != nil {
			return "", nil, err
		}
		mounts = append(mounts, m.dir)
	}
	if err := os.Mkdir(upper, 0o700); err != nil {
		return "", nil, err
	}
	if err := diffTrees(oldDir, curDir, upper); err != nil {
		return "", nil, err
	}
	s.log.Debug("read a build step's layer from the VM disk", "dir", sandboxDir,
		"export", exported.Round(time.Millisecond), "total", time.Since(t0).Round(time.Millisecond))
	return upper, release, nil
}

// mountImage mounts the ext4 image img read-only at dir through a loop
// device that goes away with the mount. noload: the image's journal was
// replayed by e2fsck (the base image was never mounted).
func mountImage(ctx context.Context, img, dir string) error {
	out, err := helperenv.Command(ctx, "mount", "-t", "ext4", "-o", "ro,loop,noload,nosuid,nodev,noexec", img, dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mounting %s: %w: %s", filepath.Base(img), err, bytes.TrimSpace(out))
	}
	return nil
}

var _ LayerSource = (*DiskSource)(nil)
