//go:build linux

package server

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// setClock sets the system clock when running as root (best effort; under
// gVisor this may be refused, which /init logs and ignores).
func setClock(t time.Time) error {
	if os.Geteuid() != 0 {
		return nil
	}
	tv := unix.NsecToTimeval(t.UnixNano())
	if err := unix.Settimeofday(&tv); err != nil {
		return fmt.Errorf("settimeofday: %w", err)
	}
	return nil
}
