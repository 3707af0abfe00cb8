//go:build linux

package identity

import (
	"os"
	"syscall"
)

// changeTime is fi's ctime (0 when unknown): a rewrite in place within the
// same mtime tick still changes it.
func changeTime(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ctim.Nano()
	}
	return 0
}
