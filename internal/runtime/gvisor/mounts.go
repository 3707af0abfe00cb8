//go:build linux

package gvisor

import (
	"errors"
	"fmt"
	"slices"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"

	"golang.org/x/sys/unix"
)

// mountsUnder returns the mount points at or below dir in this process's
// mount namespace, most recently mounted first.
func mountsUnder(dir string) ([]string, error) {
	out, err := mountinfo.Under(dir)
	if err != nil {
		return nil, err
	}
	slices.Reverse(out)
	return out, nil
}

// unmountAll unmounts everything at or below dir, falling back to a lazy
// detach for busy mounts, and fails if anything is still mounted after.
func unmountAll(dir string) error {
	mps, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, mp := range mps {
		err := unix.Unmount(mp, unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(mp, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
		}
	}
	left, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("still mounted after unmount: %v", left))
	}
	return errors.Join(errs...)
}
