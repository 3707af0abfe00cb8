//go:build linux

package microvm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// An overlay whose header names an external data file (a host path the
// root-run export would read) is refused; a plain qcow2 passes.
func TestCheckOverlay(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("needs qemu-img (qemu-utils)")
	}
	dir := t.TempDir()
	plain, ext := filepath.Join(dir, "plain.qcow2"), filepath.Join(dir, "ext.qcow2")
	for _, args := range [][]string{
		{"create", "-q", "-f", "qcow2", plain, "16M"},
		{"create", "-q", "-f", "qcow2", "-o", "data_file=" + filepath.Join(dir, "data.raw"), ext, "16M"},
	} {
		if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img %v: %v: %s", args, err, out)
		}
	}
	if err := checkOverlay(plain); err != nil {
		t.Errorf("plain qcow2 refused: %v", err)
	}
	if err := checkOverlay(ext); err == nil || !strings.Contains(err.Error(), "external data file") {
		t.Errorf("qcow2 with a data file: err = %v, want a refusal", err)
	}
	if err := checkOverlay(filepath.Join(dir, "data.raw")); err == nil {
		t.Error("a raw file passed as a qcow2 overlay")
	}
}

// ExportRootDisk stops a running VM and yields its root disk as a checked
// raw ext4 image that holds the guest's writes, made by the unprivileged
// VMM user, and names the pristine base image.
func TestExportRootDisk(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const id = "mvmtestexport"
	r, ep, spec := bootVM(t, ctx, runtime.Spec{ID: id, Resources: runtime.Resources{MemoryMB: 256}})
	dir := spec.Dir
	if out, code := guestRun(t, ctx, ep.GuestIP, "echo from-guest > /exported.txt && rm /etc/passwd && sync"); code != 0 {
		t.Fatalf("guest write: %q (exit %d)", out, code)
	}
	raw := filepath.Join(t.TempDir(), "disk.raw")
	t0 := time.Now()
	base, err := r.ExportRootDisk(ctx, dir, raw)
	if err != nil {
		t.Fatalf("ExportRootDisk: %v", err)
	}
	t.Logf("export took %s", time.Since(t0))
	if want, _ := r.baseImage(ctx, fixture.rootfs); base != want {
		t.Errorf("base = %s, want %s", base, want)
	}
	fi, err := os.Stat(raw)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != NobodyID {
		t.Errorf("raw image owned by uid %d, want the VMM user %d (qemu-img unprivileged)", st.Uid, NobodyID)
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "ext4", "-o", "ro,loop,noload", raw, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	defer func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) }()
	if b, err := os.ReadFile(filepath.Join(mnt, "exported.txt")); err != nil || string(b) != "from-guest\n" {
		t.Errorf("exported.txt in the image: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "etc/passwd")); !os.IsNotExist(err) {
		t.Errorf("etc/passwd deleted in the guest: stat err %v, want not-exist", err)
	}
}

// unmountUnder detaches the mounts below a dir (a name with a space
// included, nested mounts too) and leaves the rest alone.
func TestUnmountUnder(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	outside := t.TempDir()
	a := filepath.Join(dir, "layer 1", "old")
	b := filepath.Join(a, "nested")
	for _, p := range []string{a, outside} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{a, b, outside} {
		if p == b {
			if err := os.MkdirAll(b, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatalf("mount tmpfs at %s: %v", p, err)
		}
	}
	t.Cleanup(func() {
		for _, p := range []string{b, a, outside} {
			_ = unix.Unmount(p, unix.MNT_DETACH) // after a failure, leave nothing mounted
		}
	})
	if err := unmountUnder(dir); err != nil {
		t.Fatalf("unmountUnder: %v", err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), filepath.Join(dir, `layer\0401`)) {
		t.Errorf("a mount below %s is left:\n%s", dir, mi)
	}
	if !strings.Contains(string(mi), outside) {
		t.Error("a mount outside the dir was removed")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Errorf("removing the dir after unmountUnder: %v", err)
	}
}
