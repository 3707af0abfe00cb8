//go:build linux

package microvm

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
)

// qcow2 header fields read by checkOverlay (QEMU's docs/interop/qcow2.txt).
const (
	qcow2Magic          = 0x514649fb // "QFI\xfb"
	qcow2IncompatOffset = 72         // incompatible_features, version 3
	qcow2ExternalData   = 1 << 2     // bit 2: an external data file
)

// ExportRootDisk stops the VM of the sandbox in dir (its vCPUs halt and
// QEMU flushes the block devices) and writes the guest's root disk — the
// template's base image under the sandbox's qcow2 overlay — as a raw image
// to dst. It returns the base image, the pristine file system the guest
// started from. The VM stays stopped; the caller destroys the sandbox.
//
// The overlay is written by the VMM, which is not trusted: its header is
// checked for an external data file (which would name a host path) and
// the backing file is given explicitly instead of read from the header.
// qemu-img runs as the unprivileged VMM user.
func (r *Runtime) ExportRootDisk(ctx context.Context, dir, dst string) (base string, err error) {
	dir = filepath.Clean(dir)
	var vr vmRecord
	b, err := os.ReadFile(filepath.Join(dir, vmFile))
	if err != nil {
		return "", fmt.Errorf("reading VM record: %w", err)
	}
	if err := json.Unmarshal(b, &vr); err != nil {
		return "", fmt.Errorf("decoding VM record: %w", err)
	}
	q, err := dialQMP(ctx, filepath.Join(dir, qmpSocket))
	if err != nil {
		return "", err
	}
	_, err = q.cmd("stop", nil)
	q.close()
	if err != nil {
		return "", fmt.Errorf("stopping the VM: %w", err)
	}
	overlay := filepath.Join(dir, overlayFile)
	if err := checkOverlay(overlay); err != nil {
		return "", err
	}
	// The output is created by root and handed to the unprivileged
	// qemu-img, so it can only write that one file.
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", fmt.Errorf("creating %s: %w", dst, err)
	}
	defer out.Close()
	if err := out.Chown(r.uid, r.gid); err != nil {
		return "", fmt.Errorf("chown %s: %w", dst, err)
	}
	in, err := os.Open(overlay)
	if err != nil {
		return "", fmt.Errorf("opening overlay: %w", err)
	}
	defer in.Close()
	bf, err := os.Open(vr.Base)
	if err != nil {
		return "", fmt.Errorf("opening base image: %w", err)
	}
	defer bf.Close()
	spec := map[string]any{
		"driver": "qcow2",
		"file":   map[string]any{"driver": "file", "filename": "/dev/fd/3", "locking": "off"},
		"backing": map[string]any{"driver": "raw",
			"file": map[string]any{"driver": "file", "filename": "/dev/fd/4", "locking": "off"}},
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	cmd := r.UnprivilegedCommand(ctx, r.qemuImg, "convert", "-U", "-O", "raw", "-S", "4k", "json:"+string(js), "/dev/fd/5")
	cmd.ExtraFiles = []*os.File{in, bf, out}
	if o, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("qemu-img convert of the root disk: %w: %s", err, bytes.TrimSpace(o))
	}
	// The guest's file system was never unmounted: replay its journal and
	// check it (in user space, unprivileged) before the daemon's user-space
	// reader (imagebuild.DiskSource) reads it; the host never mounts it.
	fsck := r.UnprivilegedCommand(ctx, r.e2fsck, "-f", "-y", "/dev/fd/3")
	rw, err := os.OpenFile(dst, os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("opening %s: %w", dst, err)
	}
	defer rw.Close()
	fsck.ExtraFiles = []*os.File{rw}
	o, err := fsck.CombinedOutput()
	var ee *exec.ExitError
	// 1: errors corrected; 2: corrected, a mounted system would reboot.
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() <= 2) {
		return "", fmt.Errorf("e2fsck of the exported root disk: %w: %s", err, lastLines(o, 5))
	}
	return vr.Base, nil
}

func lastLines(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("; ")))
}

// checkOverlay refuses a qcow2 whose header asks for an external data
// file.
func checkOverlay(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening overlay: %w", err)
	}
	defer f.Close()
	var h [qcow2IncompatOffset + 8]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return fmt.Errorf("reading overlay header: %w", err)
	}
	if binary.BigEndian.Uint32(h[0:4]) != qcow2Magic {
		return errors.New("overlay is not a qcow2 image")
	}
	if v := binary.BigEndian.Uint32(h[4:8]); v >= 3 &&
		binary.BigEndian.Uint64(h[qcow2IncompatOffset:])&qcow2ExternalData != 0 {
		return errors.New("overlay header names an external data file: refused")
	}
	return nil
}

// unmountUnder detaches every mount below dir (deepest first): a build's
// layer images mounted in a sandbox dir by a daemon that died before it
// unmounted them must not stop the dir's removal.
func unmountUnder(dir string) error {
	all, err := mountinfo.Under(dir)
	if err != nil {
		return err
	}
	dir = filepath.Clean(dir)
	points := slices.DeleteFunc(all, func(p string) bool { return p == dir })
	// Longest first: children before their parents.
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
