//go:build linux

// Package loopdev mounts a filesystem image through a loop device: the
// gVisor runtime's per-sandbox disk layers (internal/runtime/gvisor) and the
// node's volumes (internal/volume) both do.
package loopdev

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// attempts bounds the retries when another attach takes the free device
// between LOOP_CTL_GET_FREE and LOOP_CONFIGURE.
const attempts = 16

// Mount attaches img to a free loop device, auto-cleared once the
// filesystem is unmounted, and mounts it on target as fstype with flags.
func Mount(img, target, fstype string, flags uintptr) error {
	imgf, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening image: %w", err)
	}
	defer imgf.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening loop-control: %w", err)
	}
	defer ctl.Close()
	for range attempts {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("finding a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		loop, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("opening %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(imgf.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], img)
		if err := unix.IoctlLoopConfigure(int(loop.Fd()), &cfg); err != nil {
			loop.Close()
			if errors.Is(err, unix.EBUSY) {
				continue // raced with another attach; pick another device
			}
			return fmt.Errorf("configuring %s: %w", dev, err)
		}
		// The device stays bound while mounted; closing our fd after the
		// mount (or on failure) lets autoclear release it.
		err = unix.Mount(dev, target, fstype, flags, "")
		loop.Close()
		if err != nil {
			return fmt.Errorf("mounting %s on %s: %w", dev, target, err)
		}
		return nil
	}
	return fmt.Errorf("no free loop device after %d attempts", attempts)
}
