//go:build linux

package gvisor

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The cgroup v1 thresholds wake the guard when a process in the cgroup
// allocates memory, not while it sits still, and the watcher ends when
// stopped.
func TestMemWatchThresholdsWakeOnGrowth(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a memory cgroup")
	}
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "cgroup.event_control")); err != nil {
		t.Skip("no cgroup v1 memory controller on this host")
	}
	dir := filepath.Join(root, fmt.Sprintf("airlock-memwatch-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A process that sits in the cgroup, allocates 96 MiB when told (a
	// line on stdin), then sits again.
	cmd := exec.Command("python3", "-c", `import sys, time
sys.stdin.readline()
b = bytearray(96 << 20)
for i in range(0, len(b), 4096): b[i] = 1
print("allocated", flush=True)
time.sleep(60)`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("python3: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for i := 0; i < 50; i++ {
			if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	wakes := make(chan struct{}, 64)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- memWatchThresholds(dir, stop, func() { wakes <- struct{}{} }) }()
	// Still: no wake-up.
	select {
	case <-wakes:
		t.Fatal("woken while the cgroup's memory stood still")
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := out.Read(buf); err != nil {
		t.Fatalf("reading the allocator: %v", err)
	}
	// 96 MiB of growth crosses at least two 32 MiB steps.
	for i := 0; i < 2; i++ {
		select {
		case <-wakes:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d wake-ups after 96 MiB of growth, want at least 2", i)
		}
	}
	// (The watcher itself does not limit its rate: gapped does, below.)
	close(stop)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("watcher ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watcher did not stop")
	}
}

// gapped drops wake-ups closer than memWakeMinGap to the last one.
func TestGappedWakes(t *testing.T) {
	n := 0
	w := gapped(func() { n++ })
	for i := 0; i < 100; i++ {
		w()
	}
	if n != 1 {
		t.Fatalf("%d wake-ups from 100 calls at once, want 1", n)
	}
}
