//go:build linux

package network

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// nsMountDir is a scratch directory holding one nsfs bind mount (the test
// process's own network namespace) at name "ns"; everything is unmounted
// at the end.
func nsMountDir(t *testing.T) (dir, file string) {
	t.Helper()
	needRoot(t)
	dir = t.TempDir()
	file = filepath.Join(dir, "ns")
	if err := os.WriteFile(file, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/proc/self/ns/net", file, "none", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting a netns: %v", err)
	}
	t.Cleanup(func() {
		for range maxStacked {
			if unix.Unmount(dir, unix.MNT_DETACH) != nil {
				break
			}
		}
		_ = unmountStacked(file)
	})
	return dir, file
}

// mountsOn returns the mountinfo lines whose mount point is path.
func mountsOn(t *testing.T, path string) []mountInfo {
	t.Helper()
	all, err := readMountInfo()
	if err != nil {
		t.Fatal(err)
	}
	var out []mountInfo
	for _, mi := range all {
		if mi.mountPoint == path {
			out = append(out, mi)
		}
	}
	return out
}

// The leftover of issue 26: the namespace was mounted while its directory
// was a plain one, then the directory was bind-mounted on itself recursively
// (`ip netns add` does that on a host where it is not a mount point yet). The
// path reaches only the copy; the original stays underneath, and removing
// the file answered EBUSY for ever.
func TestDeleteNamedNetNSHiddenUnderDirMount(t *testing.T) {
	dir, file := nsMountDir(t)
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatalf("bind-mounting the directory on itself: %v", err)
	}
	if n := len(mountsOn(t, file)); n != 2 {
		t.Fatalf("set-up: %d mounts on %s, want the copy and the hidden original", n, file)
	}
	// What the old removal did, on the copy only: the file stays busy.
	if err := unix.Unmount(file, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(file); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("set-up: removing with a hidden mount answered %v, want EBUSY", err)
	}
	if err := unix.Unmount(file, unix.MNT_DETACH); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("set-up: the path should not reach the hidden mount, umount answered %v", err)
	}

	if err := deleteNamedNetNS(file); err != nil {
		t.Fatalf("deleteNamedNetNS: %v", err)
	}
	if _, err := os.Lstat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there: %v", file, err)
	}
	if m := mountsOn(t, file); len(m) != 0 {
		t.Errorf("mounts left on %s: %+v", file, m)
	}
}

// Two mounts stacked on the file (a second bind of any namespace on it):
// both are taken off.
func TestDeleteNamedNetNSStacked(t *testing.T) {
	_, file := nsMountDir(t)
	if err := unix.Mount("/proc/self/ns/net", file, "none", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := deleteNamedNetNS(file); err != nil {
		t.Fatalf("deleteNamedNetNS: %v", err)
	}
	if _, err := os.Lstat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there: %v", file, err)
	}
	if err := deleteNamedNetNS(file); err != nil {
		t.Errorf("deleting a missing namespace: %v", err)
	}
}

// ensureNetNSDir makes the directory a shared mount point of its own, once:
// a later recursive bind (what iproute2 does when it is not one) cannot
// happen any more, nor hide what is mounted in it.
func TestEnsureNetNSDirShared(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	for range 2 {
		if err := ensureNetNSDir(dir); err != nil {
			t.Fatal(err)
		}
	}
	m := mountsOn(t, dir)
	if len(m) != 1 {
		t.Fatalf("%d mounts on %s, want 1", len(m), dir)
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 6 && f[4] == dir && !strings.Contains(line, " shared:") {
			t.Errorf("%s is not shared: %s", dir, line)
		}
	}
}
