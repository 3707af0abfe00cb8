//go:build linux

package runtime

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// CheckNetNS verifies that path is a network namespace other than the
// host's and this process's own.
func CheckNetNS(path string) error {
	var st, other unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("NetNSPath: %v", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil || fs.Type != unix.NSFS_MAGIC {
		return fmt.Errorf("NetNSPath %s is not a namespace file", path)
	}
	for _, p := range []string{"/proc/1/ns/net", "/proc/self/ns/net"} {
		if err := unix.Stat(p, &other); err == nil && other.Dev == st.Dev && other.Ino == st.Ino {
			return fmt.Errorf("NetNSPath %s is the host's network namespace", path)
		}
	}
	return nil
}

// Check validates the fields every runtime's Start needs: id, absolute
// Dir, RootFS directory, AgentPath file, a network namespace of its own and
// non-negative limits.
func (s Spec) Check() error {
	if err := ValidID(s.ID); err != nil {
		return err
	}
	if !filepath.IsAbs(s.Dir) || filepath.Clean(s.Dir) == "/" {
		return fmt.Errorf("dir %q must be an absolute path", s.Dir)
	}
	if fi, err := os.Stat(s.RootFS); err != nil || !fi.IsDir() || !filepath.IsAbs(s.RootFS) {
		return fmt.Errorf("RootFS %q is not an absolute directory", s.RootFS)
	}
	if fi, err := os.Stat(s.AgentPath); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("AgentPath %q is not a regular file", s.AgentPath)
	}
	if s.NetNSPath == "" {
		return fmt.Errorf("NetNSPath is required")
	}
	if err := CheckNetNS(s.NetNSPath); err != nil {
		return err
	}
	r := s.Resources
	if r.CPUCount < 0 || r.MemoryMB < 0 || r.DiskMB < 0 || r.PIDs < 0 || r.OpenFiles < 0 {
		return fmt.Errorf("negative resource limit")
	}
	return CheckMounts(s.Mounts)
}
