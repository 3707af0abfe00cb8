// Package diskspace tells when the host filesystem holding the daemon's data
// directory is (nearly) full, so that operations which write there (creating a
// sandbox, uploading into one, writing a pause image) are refused with a clear
// error instead of failing half-way.
package diskspace

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// ErrFull is wrapped by every error that means "the host's disk is full".
var ErrFull = errors.New("the host's disk is full")

// MinFreeInodes is the number of free inodes below which a filesystem counts
// as full (each sandbox needs a handful of files and directories).
const MinFreeInodes = 256

// Usage is what statfs says about a filesystem.
type Usage struct {
	AvailBytes  uint64 // free to unprivileged writers
	TotalBytes  uint64
	AvailInodes uint64 // 0 with TotalInodes 0 means "not reported"
	TotalInodes uint64
}

// Checker refuses work when the filesystem holding Dir has less than Reserve
// bytes (or MinFreeInodes inodes) free. A nil Checker or a zero Dir never
// refuses.
type Checker struct {
	Dir     string
	Reserve uint64
	// stat is Stat; replaced in tests.
	stat func(dir string) (Usage, error)
}

// New returns a Checker for dir with reserveMB MiB kept free.
func New(dir string, reserveMB int) *Checker {
	if reserveMB < 0 {
		reserveMB = 0
	}
	return &Checker{Dir: dir, Reserve: uint64(reserveMB) << 20}
}

// Check returns an error wrapping ErrFull when the filesystem is too full for
// new work. Failing to read the filesystem's usage is not reported as full.
func (c *Checker) Check() error {
	if c == nil || c.Dir == "" {
		return nil
	}
	stat := c.stat
	if stat == nil {
		stat = Stat
	}
	u, err := stat(c.Dir)
	if err != nil {
		return nil // unknown usage: the operation itself fails if it must
	}
	if u.AvailBytes < c.Reserve || u.AvailBytes == 0 {
		return fmt.Errorf("%w: %s free of %s on the filesystem holding %s (at least %s must stay free)",
			ErrFull, human(u.AvailBytes), human(u.TotalBytes), c.Dir, human(c.Reserve))
	}
	if u.TotalInodes > 0 && u.AvailInodes < MinFreeInodes {
		return fmt.Errorf("%w: %d of %d inodes free on the filesystem holding %s", ErrFull, u.AvailInodes, u.TotalInodes, c.Dir)
	}
	return nil
}

// IsNoSpace reports whether err means the disk (or its inodes or quota) ran
// out: ENOSPC/EDQUOT anywhere in the chain, or the message a child process
// (mkfs, runsc, cp) printed for it.
func IsNoSpace(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrFull) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "no space left on device") || strings.Contains(msg, "disk quota exceeded") ||
		strings.Contains(msg, "database or disk is full") // SQLITE_FULL
}

func human(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	default:
		return fmt.Sprintf("%d KiB", b>>10)
	}
}
