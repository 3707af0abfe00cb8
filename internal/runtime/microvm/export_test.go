//go:build linux

package microvm

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
