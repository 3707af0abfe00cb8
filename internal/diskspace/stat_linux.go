//go:build linux

package diskspace

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Stat reads the usage of the filesystem holding dir.
func Stat(dir string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Usage{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	bs := uint64(st.Bsize)
	return Usage{
		AvailBytes:  st.Bavail * bs,
		TotalBytes:  st.Blocks * bs,
		AvailInodes: st.Ffree,
		TotalInodes: st.Files,
	}, nil
}
