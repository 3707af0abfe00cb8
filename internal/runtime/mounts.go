package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// CheckMounts refuses mounts whose source is not an absolute host
// directory, or whose destination is relative, not clean, repeated, or
// at or under a path the runtime itself mounts (/, /proc, /dev, /sys,
// the agent).
func CheckMounts(ms []Mount) error {
	seen := map[string]bool{}
	for _, m := range ms {
		if fi, err := os.Stat(m.Source); err != nil || !fi.IsDir() || !filepath.IsAbs(m.Source) {
			return fmt.Errorf("mount source %q is not an absolute directory", m.Source)
		}
		d := m.Destination
		if !filepath.IsAbs(d) || filepath.Clean(d) != d || d == "/" {
			return fmt.Errorf("mount destination %q must be a clean absolute path other than /", d)
		}
		for _, p := range []string{"/proc", "/dev", "/sys", AgentGuestPath} {
			if d == p || strings.HasPrefix(d, p+"/") {
				return fmt.Errorf("mount destination %q shadows %s", d, p)
			}
		}
		if seen[d] {
			return fmt.Errorf("mount destination %q repeats", d)
		}
		seen[d] = true
	}
	return nil
}

// VolumeMounter is implemented by runtimes that mount Spec.Mounts into
// their sandboxes; the others refuse specs that have any.
type VolumeMounter interface {
	MountsVolumes() bool
}
