//go:build linux

package identity

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

func TestRunAs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: switches thread credentials")
	}
	nobody, err := Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Dir(dir), 0o700) })

	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 20 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs <- RunAs(nobody, func() error {
				return os.WriteFile(filepath.Join(dir, "u"+string(rune('a'+i))), nil, 0o644)
			})
		}()
		go func() {
			defer wg.Done()
			errs <- os.WriteFile(filepath.Join(dir, "r"+string(rune('a'+i))), nil, 0o644)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		fi, _ := de.Info()
		uid := fi.Sys().(*syscall.Stat_t).Uid
		want := uint32(0)
		if de.Name()[0] == 'u' {
			want = 65534
		}
		if uid != want {
			t.Fatalf("%s owned by %d, want %d", de.Name(), uid, want)
		}
	}
	// Permissions are enforced: nobody cannot write into a root 0755 dir.
	locked := filepath.Join(dir, "locked")
	if err := os.Mkdir(locked, 0o755); err != nil {
		t.Fatal(err)
	}
	err = RunAs(nobody, func() error { return os.WriteFile(filepath.Join(locked, "x"), nil, 0o644) })
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("want permission error, got %v", err)
	}
	if os.Geteuid() != 0 || os.Getegid() != 0 {
		t.Fatal("process credentials changed")
	}
}

func TestRunner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: switches thread credentials")
	}
	nobody, err := Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(nobody)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // one thread, many calls, each as nobody
		var uid, gid int
		if err := r.Do(func() error { uid, gid = syscall.Geteuid(), syscall.Getegid(); return nil }); err != nil {
			t.Fatal(err)
		}
		if uid != 65534 || gid != 65534 {
			t.Fatalf("Do ran as %d:%d, want 65534:65534", uid, gid)
		}
	}
	if os.Geteuid() != 0 || os.Getegid() != 0 {
		t.Fatal("process credentials changed")
	}
	r.Close()
	r.Close()
	if err := r.Do(func() error { t.Error("ran after Close"); return nil }); err == nil {
		t.Fatal("Do after Close succeeded")
	}
	// No switch needed: Do runs the function directly.
	root, err := Lookup("root")
	if err != nil {
		t.Fatal(err)
	}
	direct, err := NewRunner(root)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if err := direct.Do(func() error { return errors.New("direct") }); err == nil || err.Error() != "direct" {
		t.Fatalf("direct Do = %v", err)
	}
}
