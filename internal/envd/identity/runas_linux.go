//go:build linux

package identity

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// RunAs runs fn on a dedicated OS thread whose effective uid, gid and
// supplementary groups are those of u, so the kernel enforces u's file
// permissions and everything fn creates is owned by u. The thread is never
// returned to the Go scheduler: it exits with the goroutine, so the changed
// credentials cannot leak into other goroutines.
//
// Only the calling thread changes (raw setresuid/setresgid/setgroups, not the
// all-threads variants of package syscall). When the agent already runs as u,
// or u is nil, fn runs directly. A non-root agent cannot switch users and gets
// an error.
func RunAs(u *User, fn func() error) error {
	if u == nil || (uint32(os.Geteuid()) == u.UID && uint32(os.Getegid()) == u.GID) {
		return fn()
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("acting as user %q: agent is not running as root", u.Name)
	}
	errc := make(chan error, 1)
	go func() {
		// Deliberately never unlocked: the thread is discarded when this
		// goroutine returns.
		runtime.LockOSThread()
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("panic while acting as user %q: %v", u.Name, r)
			}
		}()
		if err := switchThreadCreds(u); err != nil {
			errc <- fmt.Errorf("switching thread to user %q: %w", u.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// switchThreadCreds changes the calling thread's groups, egid and euid. The
// saved ids stay 0; the thread is thrown away afterwards anyway.
func switchThreadCreds(u *User) error {
	groups := make([]uint32, 0, len(u.Groups)+1)
	groups = append(groups, u.GID)
	for _, g := range u.Groups {
		if g != u.GID {
			groups = append(groups, g)
		}
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0); errno != 0 {
		return fmt.Errorf("setgroups: %w", errno)
	}
	keep := ^uintptr(0) // -1: leave unchanged
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(u.GID), keep); errno != 0 {
		return fmt.Errorf("setresgid: %w", errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(u.UID), keep); errno != 0 {
		return fmt.Errorf("setresuid: %w", errno)
	}
	return nil
}
