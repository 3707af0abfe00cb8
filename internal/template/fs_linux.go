//go:build linux

package template

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"

	"golang.org/x/sys/unix"
)

type fileID struct{ dev, ino uint64 }

func fileIDOf(fi fs.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, true
}

// removeTree deletes dir recursively after detaching any mount points below
// it (an interrupted mmdebstrap may leave /proc, /sys or /dev mounted in the
// chroot; os.RemoveAll must never descend into those).
func removeTree(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", dir, err)
	}
	mounts, err := mountsBelow(abs)
	if err != nil {
		return err
	}
	for _, mp := range mounts {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return fmt.Errorf("unmounting %s: %w", mp, err)
		}
	}
	if left, err := mountsBelow(abs); err != nil {
		return err
	} else if len(left) > 0 {
		return fmt.Errorf("refusing to remove %s: still mounted: %v", abs, left)
	}
	if err := os.RemoveAll(abs); err != nil {
		return fmt.Errorf("removing %s: %w", abs, err)
	}
	return nil
}

// mountsBelow returns the mount points at or below dir, deepest first.
func mountsBelow(dir string) ([]string, error) {
	out, err := mountinfo.Under(dir)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out, nil
}
