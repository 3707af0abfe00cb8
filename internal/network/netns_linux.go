//go:build linux

package network

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
)

// Named network namespaces are nsfs bind mounts on files in NetNSDir.
//
// Why a removal could answer "device or resource busy" (issue 26): unlink(2)
// refuses a file that is a mount point in the caller's own mount namespace.
// When NetNSDir is a plain directory while namespaces are mounted in it, and
// something later bind-mounts the directory on itself recursively — what
// `ip netns add` does the first time it runs on a host, to make the directory
// a shared mount — every namespace mounted until then exists twice: once on
// the new mount, where its path leads, and once on the directory underneath,
// which no path reaches any more. Unmounting the path removes only the first;
// the hidden one keeps the file busy for ever ("umount: not mounted", "ip netns
// del: busy"). Two remedies here: the manager makes NetNSDir a shared mount
// point of its own before it mounts anything in it (ensureNetNSDir, as
// iproute2 does), so the duplication cannot happen after it starts; and
// deleteNamedNetNS unmounts every mount left on the file, the hidden ones too
// (unmountHidden), so the ones made before are removed as well.

// ensureNetNSOnce makes ensureNetNSDir run once per process.
var ensureNetNSOnce = sync.OnceValue(func() error { return ensureNetNSDir(NetNSDir) })

// ensureNetNSDir makes dir (created if missing) a shared mount point, as
// iproute2's `ip netns add` does: mark it shared, and when it is not a mount
// point yet, bind-mount it on itself (recursively, so namespaces already
// mounted in it stay reachable) first.
func ensureNetNSDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("making %s a shared mount: %w", dir, err)
	}
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mounting %s on itself: %w", dir, err)
	}
	if err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making %s a shared mount: %w", dir, err)
	}
	return nil
}

// maxStacked bounds the mounts deleteNamedNetNS takes off one path.
const maxStacked = 16

// deleteNamedNetNS unmounts and removes a named netns; missing is fine. It
// takes off every mount stacked on path and, when the file is still a mount
// point that path does not reach (see above), the hidden mounts too.
func deleteNamedNetNS(path string) error {
	if err := unmountStacked(path); err != nil {
		return err
	}
	err := os.Remove(path)
	if errors.Is(err, unix.EBUSY) {
		if herr := unmountHidden(path); herr != nil {
			return fmt.Errorf("removing %s: %w (%w)", path, err, herr)
		}
		err = os.Remove(path)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	return nil
}

// unmountStacked detaches the mounts on path, top first, until none is left.
func unmountStacked(path string) error {
	for range maxStacked {
		err := unix.Unmount(path, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil // not (or no longer) a mount point
		}
		if err != nil {
			return fmt.Errorf("unmounting %s: %w", path, err)
		}
	}
	return fmt.Errorf("unmounting %s: more than %d mounts stacked on it", path, maxStacked)
}

// unmountHidden detaches the mounts on path's file that path does not reach:
// those on the same directory seen through a mount that was later placed over
// it (or over one of its parents). For each such mount it opens the directory
// inside the mount underneath by file handle (open_by_handle_at does not
// cross into mounts above the handle's mount) and unmounts
// /proc/self/fd/<that>/<name>, which leads to the hidden mount.
func unmountHidden(path string) error {
	dir, name := filepath.Split(filepath.Clean(path))
	// mountinfo names the real path (/run/netns, not /var/run/netns).
	dir, err := filepath.EvalSymlinks(filepath.Clean(dir))
	if err != nil {
		return fmt.Errorf("resolving %s: %w", path, err)
	}
	path = filepath.Join(dir, name)
	mounts, err := readMountInfo()
	if err != nil {
		return err
	}
	byID := map[int]mountInfo{}
	for _, mi := range mounts {
		byID[mi.id] = mi
	}
	handle, _, err := unix.NameToHandleAt(unix.AT_FDCWD, dir, 0)
	if err != nil {
		return fmt.Errorf("file handle of %s: %w", dir, err)
	}
	var errs []error
	found := 0
	for _, mi := range mounts {
		if mi.mountPoint != path {
			continue
		}
		parent, ok := byID[mi.parent]
		if !ok {
			continue
		}
		found++
		if err := unmountUnder(parent, handle, name); err != nil {
			errs = append(errs, err)
		}
	}
	if found == 0 {
		return fmt.Errorf("%s is busy but no mount of this namespace is on it", path)
	}
	return errors.Join(errs...)
}

// unmountUnder unmounts what is mounted on name in the directory of handle,
// as seen inside the mount parent.
func unmountUnder(parent mountInfo, handle unix.FileHandle, name string) error {
	// Not O_PATH: open_by_handle_at refuses one as its mount fd.
	pfd, err := unix.Open(parent.mountPoint, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening mount %d at %s: %w", parent.id, parent.mountPoint, err)
	}
	defer unix.Close(pfd)
	// The path may lead to another mount over parent; the handle's decoding
	// is only right inside parent itself.
	if _, id, err := unix.NameToHandleAt(pfd, "", unix.AT_EMPTY_PATH); err != nil || id != parent.id {
		return fmt.Errorf("mount %d at %s is covered (found mount %d): %w", parent.id, parent.mountPoint, id, err)
	}
	dfd, err := unix.OpenByHandleAt(pfd, handle, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return fmt.Errorf("opening the directory inside mount %d: %w", parent.id, err)
	}
	defer unix.Close(dfd)
	target := "/proc/self/fd/" + strconv.Itoa(dfd) + "/" + name
	if err := unmountStacked(target); err != nil {
		return fmt.Errorf("unmounting the hidden mount of %s: %w", name, err)
	}
	return nil
}

// mountInfo is one line of /proc/self/mountinfo.
type mountInfo struct {
	id, parent int
	mountPoint string
}

// readMountInfo parses /proc/self/mountinfo.
func readMountInfo() ([]mountInfo, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	defer f.Close()
	var out []mountInfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		id, err1 := strconv.Atoi(fields[0])
		parent, err2 := strconv.Atoi(fields[1])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, mountInfo{id: id, parent: parent, mountPoint: mountinfo.Unescape(fields[4])})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	return out, nil
}
