//go:build linux

package daemonlock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestAcquireRefusesSecondHolderAndNamesFirst(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "daemon.lock")
	l, err := Acquire(path, "the data directory "+dir, "pid 111: airlock serve --data-dir "+dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(path, "the data directory "+dir, "pid 222: airlock serve")
	var he *HeldError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "pid 111: airlock serve --data-dir") {
		t.Fatalf("second Acquire: err = %v, want a HeldError naming pid 111", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(path, "x", "pid 333")
	if err != nil {
		t.Fatalf("Acquire after release: %v", err)
	}
	l2.Close()
}

// The kernel drops a lock with its holder, SIGKILL included: a daemon
// restarted after a crash is never refused by a stale lock file.
func TestLockGoesWithKilledHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "net-x.lock")
	// -o: flock(1) itself holds the lock; its child does not inherit it.
	cmd := exec.Command("flock", "-o", "-x", path, "sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	if err := cmd.Start(); err != nil {
		t.Fatalf("flock(1): %v", err)
	}
	for i := 0; !held(path); i++ {
		if i > 200 {
			t.Fatal("flock(1) never took the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := Acquire(path, "x", "me"); err == nil {
		t.Fatal("lock held by a live process was taken")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	l, err := Acquire(path, "x", "me")
	if err != nil {
		t.Fatalf("lock of a killed holder: %v", err)
	}
	l.Close()
}

func TestNetPrefixOverlap(t *testing.T) {
	run := t.TempDir()
	a, err := AcquireNetPrefix(run, "ale2e", "pid 1: ale2e daemon")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := AcquireNetPrefix(run, "ale2e", "pid 2"); err == nil || !strings.Contains(err.Error(), "pid 1: ale2e daemon") {
		t.Errorf("same prefix: err = %v, want refusal naming the holder", err)
	}
	for _, p := range []string{"al", "ale2ex"} {
		if _, err := AcquireNetPrefix(run, p, "pid 3"); err == nil || !strings.Contains(err.Error(), "overlaps --net-prefix ale2e") {
			t.Errorf("prefix %s: err = %v, want refusal for the overlap", p, err)
		}
	}
	// A disjoint prefix is fine, and an overlapping one is fine once the
	// holder is gone (its lock file stays behind).
	b, err := AcquireNetPrefix(run, "alvm", "pid 4")
	if err != nil {
		t.Fatalf("disjoint prefix: %v", err)
	}
	b.Close()
	a.Close()
	c, err := AcquireNetPrefix(run, "al", "pid 5")
	if err != nil {
		t.Fatalf("overlapping prefix after the holder left: %v", err)
	}
	c.Close()
	if _, err := os.Stat(filepath.Join(run, "net-ale2e.lock")); err != nil {
		t.Fatalf("lock file: %v", err)
	}
	if _, err := AcquireNetPrefix(run, "a/b", "x"); err == nil {
		t.Error("prefix with a slash accepted")
	}
}
