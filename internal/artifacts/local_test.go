package artifacts

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A local store shared by several daemons: opening it removes only the
// partial writes nobody touched for an hour (a crashed process's), not the
// one another daemon is writing now.
func TestNewLocalKeepsOthersWritesInProgress(t *testing.T) {
	root := t.TempDir()
	if _, err := NewLocal(root); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(root, ".tmp", "put-live")
	stale := filepath.Join(root, ".tmp", "put-crashed")
	for _, p := range []string{fresh, stale} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := NewLocal(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a write in progress was removed: %v", err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a crashed process's partial write was kept: %v", err)
	}
}
