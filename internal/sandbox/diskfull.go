package sandbox

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/diskspace"
)

// DefaultDiskReserveMB is the free space (MiB) the data directory's
// filesystem must keep for creates, pauses and uploads to be accepted.
const DefaultDiskReserveMB = 256

// hostDiskCode is the status of "the host's disk is full" (507 Insufficient
// Storage; the E2B SDKs raise NotEnoughSpaceError for it).
const hostDiskCode = http.StatusInsufficientStorage

// CheckHostDisk returns a user error (507) when the filesystem holding the
// sandboxes' directories is too full to accept work that writes to it:
// creates, pause images and uploads (the proxy calls it for POST /files).
// Sandboxes' writable layers are sparse images on that filesystem, so a
// write inside a sandbox on a full host fails with an I/O error; refusing
// early leaves room for the sandboxes already running.
func (m *Manager) CheckHostDisk() error {
	dir := filepath.Join(m.cfg.DataDir, "sandboxes")
	if _, err := os.Stat(dir); err != nil {
		dir = m.cfg.DataDir
	}
	reserve := m.cfg.DiskReserveMB
	switch {
	case reserve == 0:
		reserve = DefaultDiskReserveMB
	case reserve < 0:
		reserve = 0 // only a completely full disk refuses
	}
	if err := diskspace.New(dir, reserve).Check(); err != nil {
		m.log.Warn("refusing work: host disk full", "err", err)
		return &Error{Code: hostDiskCode, Msg: err.Error() + "; free space on the host and retry"}
	}
	return nil
}

// hostDiskFull turns an error caused by the host's disk running out of space
// (ENOSPC from mkfs, runsc, cp, or a write of ours) into a 507 user error
// saying so, with what was lost; other errors are returned unchanged.
func hostDiskFull(err error, what string) error {
	if err == nil || !diskspace.IsNoSpace(err) {
		return err
	}
	var ue *Error
	if errors.As(err, &ue) && ue.Code == hostDiskCode {
		return err
	}
	return &Error{Code: hostDiskCode, Msg: fmt.Sprintf("%s: the host's disk is full (no space left on the daemon's data directory); free space on the host and retry", what)}
}
