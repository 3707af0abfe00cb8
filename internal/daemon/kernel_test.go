package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFindKernelHonoursCacheEnv: the daemon looks for the guest kernel
// where scripts/build-kernel.sh put it, $AIRLOCK_KERNEL_CACHE included,
// and takes the newest build there.
func TestFindKernelHonoursCacheEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AIRLOCK_KERNEL_CACHE", dir)
	if _, err := findKernel(""); err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("empty cache: err = %v, want one naming %s", err, dir)
	}
	old := filepath.Join(dir, "aaaa", "vmlinux")
	newer := filepath.Join(dir, "bbbb", "vmlinux")
	for i, p := range []string{old, newer} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("k"), 0o644); err != nil {
			t.Fatal(err)
		}
		mt := time.Now().Add(time.Duration(i-2) * time.Hour)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	got, err := findKernel("")
	if err != nil || got != newer {
		t.Fatalf("findKernel = %q, %v; want %q", got, err, newer)
	}
	if got, err := findKernel(old); err != nil || got != old {
		t.Fatalf("flag: findKernel = %q, %v; want %q", got, err, old)
	}
}
