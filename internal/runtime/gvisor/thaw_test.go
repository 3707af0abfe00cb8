//go:build linux

package gvisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// writeWithin writes a file under dir and reports whether it finished
// within d (a write to a frozen filesystem blocks until the thaw).
func writeWithin(t *testing.T, dir string, d time.Duration) bool {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(filepath.Join(dir, "probe"), []byte("x"), 0o600) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("write: %v", err)
		}
		return true
	case <-time.After(d):
		return false
	}
}

// A layer left frozen by a daemon killed during a layer copy is thawed by
// thawLayer (called before a restore and a destroy), and copyFrozen copes
// with finding it frozen. Needs root (loop mount, FIFREEZE).
func TestThawLayerLeftFrozen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (loop mount and FIFREEZE); run as root like scripts/test.sh")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, diskImage)
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-O", "^has_journal", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v %s", err, out)
	}
	layer := filepath.Join(dir, layerDir)
	if err := os.Mkdir(layer, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := mountImage(img, layer); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = thawLayer(dir); _ = unmountAll(dir) })

	if thawed, err := thawLayer(dir); err != nil || thawed {
		t.Fatalf("thawLayer of a layer that is not frozen: %v, %v", thawed, err)
	}
	freeze := func() {
		f, err := os.Open(layer)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := unix.IoctlSetInt(int(f.Fd()), fiFreeze, 0); err != nil {
			t.Fatalf("FIFREEZE: %v", err)
		}
	}
	freeze()
	if writeWithin(t, layer, 300*time.Millisecond) {
		t.Fatal("a write to the frozen layer went through (the test's freeze did not take)")
	}
	thawed, err := thawLayer(dir)
	if err != nil || !thawed {
		t.Fatalf("thawLayer of a frozen layer: %v, %v", thawed, err)
	}
	if !writeWithin(t, layer, 5*time.Second) {
		t.Fatal("the layer is still frozen after thawLayer")
	}

	// copyFrozen finds the layer frozen, copies it and leaves it thawed.
	freeze()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := copyFrozen(ctx, layer, img, filepath.Join(t.TempDir(), "copy.img")); err != nil {
		t.Fatalf("copyFrozen of a layer left frozen: %v", err)
	}
	if !writeWithin(t, layer, 5*time.Second) {
		t.Fatal("the layer is frozen after copyFrozen")
	}
}
