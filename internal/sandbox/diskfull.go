package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

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
func (m *Manager) CheckHostDisk() error { return m.checkHostDisk(0, "") }

// checkHostDisk is CheckHostDisk for an operation that will write about
// extra bytes (what says what they are for).
func (m *Manager) checkHostDisk(extra uint64, what string) error {
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
	c := diskspace.New(dir, reserve)
	c.Reserve += extra
	if err := c.Check(); err != nil {
		m.log.Warn("refusing work: host disk full", "err", err, "for", what)
		msg := err.Error()
		if what != "" {
			msg += fmt.Sprintf(", including about %d MiB for %s", extra>>20, what)
		}
		return &Error{Code: hostDiskCode, Msg: msg + "; free space on the host and retry"}
	}
	return nil
}

// checkPauseSpace refuses a pause or fork of id whose memory image would not
// fit: a gVisor checkpoint that cannot write its image stops the sandbox, so
// the image (about the memory the sandbox uses) must fit next to the reserve.
func (e *Live) checkPauseSpace(ctx context.Context) error {
	m, id := e.m, e.rec.ID
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var need uint64
	if st, err := m.cfg.Runtime.Stats(sctx, id, m.sandboxDir(id)); err == nil {
		need = st.MemoryUsed
	} else {
		m.log.Debug("reading memory use before a checkpoint", "sandbox", id, "err", err)
	}
	return m.checkHostDisk(need, "the memory image")
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
