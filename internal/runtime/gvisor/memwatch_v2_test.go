//go:build linux

package gvisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeCgroupV2 is a directory with the three files the v2 watcher uses.
// This host's memory controller is on cgroup v1, so the kernel's side
// (a memory.events change when usage goes over memory.high) is played by
// the test; TestWatchModifiedKernfs shows that the notification the
// watcher waits for comes from a real cgroup v2 file.
type fakeCgroupV2 struct {
	t   *testing.T
	dir string
	// highs counts the "high" events written.
	highs int
}

func newFakeCgroupV2(t *testing.T, usage uint64) *fakeCgroupV2 {
	f := &fakeCgroupV2{t: t, dir: t.TempDir()}
	f.write("memory.current", strconv.FormatUint(usage, 10))
	f.write("memory.high", "max")
	f.write("memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
	return f
}

func (f *fakeCgroupV2) write(name, v string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, name), []byte(v+"\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// setUsage sets memory.current and, when crossed says so, counts a
// "high" event the way the kernel does when usage goes over memory.high.
func (f *fakeCgroupV2) setUsage(usage uint64, crossed bool) {
	// Replaced whole, as the kernel's file reads: the watcher must not
	// see it empty halfway through a write.
	tmp := filepath.Join(f.dir, ".memory.current")
	if err := os.WriteFile(tmp, []byte(strconv.FormatUint(usage, 10)+"\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(f.dir, "memory.current")); err != nil {
		f.t.Fatal(err)
	}
	if crossed {
		f.highs++
		f.write("memory.events", fmt.Sprintf("low 0\nhigh %d\nmax 0\noom 0\noom_kill 0\n", f.highs))
	}
}

func (f *fakeCgroupV2) high() string {
	b, err := os.ReadFile(filepath.Join(f.dir, "memory.high"))
	if err != nil {
		f.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// waitHigh waits until memory.high reads want.
func (f *fakeCgroupV2) waitHigh(want uint64) {
	f.t.Helper()
	w := strconv.FormatUint(want, 10)
	deadline := time.Now().Add(5 * time.Second)
	for f.high() != w {
		if time.Now().After(deadline) {
			f.t.Fatalf("memory.high = %s, want %s", f.high(), w)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The v2 watcher arms memory.high one step above the usage, wakes the
// guard when the kernel reports the crossing and moves the tripwire up,
// ignores other memory.events changes, lowers the tripwire after a fall,
// and stops when told.
func TestMemWatchHighTripwire(t *testing.T) {
	const mib = 1 << 20
	base := uint64(200 * mib)
	f := newFakeCgroupV2(t, base)
	wakes := make(chan struct{}, 16)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- memWatchHighEvery(f.dir, stop, func() { wakes <- struct{}{} }, 100*time.Millisecond)
	}()
	f.waitHigh(base + memWatchStep)

	noWake := func(what string) {
		t.Helper()
		select {
		case <-wakes:
			t.Fatalf("woken %s", what)
		case <-time.After(300 * time.Millisecond):
		}
	}
	// Idle: nothing happens (and no re-arm timer runs: the tripwire stays).
	noWake("while the memory stood still")
	// Growth below the tripwire: no event from the kernel, no wake.
	f.setUsage(base+10*mib, false)
	noWake("below the tripwire")
	// A memory.events change that is not a crossing (say "max" counted
	// again after a fall): the usage decides, no wake.
	f.write("memory.events", "low 0\nhigh 0\nmax 1\noom 0\noom_kill 0\n")
	noWake("by a memory.events change with usage below the tripwire")

	// The crossing: a wake-up and the tripwire a step above the new usage.
	grown := base + memWatchStep + 5*mib
	f.setUsage(grown, true)
	select {
	case <-wakes:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up after the usage crossed memory.high")
	}
	f.waitHigh(grown + memWatchStep)

	// A fall: no event from the kernel; the re-arm lowers the tripwire.
	fallen := base + 3*mib
	f.setUsage(fallen, false)
	f.waitHigh(fallen + memWatchStep)
	noWake("by a fall")

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

// A removed cgroup ends the v2 watcher with an error wrapping
// os.ErrNotExist (the runtime logs no warning for it).
func TestMemWatchHighCgroupGone(t *testing.T) {
	f := newFakeCgroupV2(t, 100<<20)
	done := make(chan error, 1)
	go func() { done <- memWatchHighEvery(f.dir, make(chan struct{}), func() {}, time.Hour) }()
	f.waitHigh(100<<20 + memWatchStep)
	if err := os.Remove(filepath.Join(f.dir, "memory.events")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("watcher ended with %v, want os.ErrNotExist", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watcher did not end with its cgroup")
	}
}

// watchModified on a real cgroup v2 file: the kernel's cgroup file
// notification (cgroup_file_notify, the same path as memory.events) reaches
// the watcher as a modification. cgroup.events' "populated" changes when a
// process enters the cgroup; this host's memory controller is on v1, so
// memory.events itself cannot be driven here.
func TestWatchModifiedKernfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a cgroup")
	}
	var root string
	for _, r := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(r, "cgroup.procs")); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(r, "cgroup.subtree_control")); err == nil || r == "/sys/fs/cgroup/unified" {
			root = r
			break
		}
	}
	if root == "" {
		t.Skip("no cgroup v2 hierarchy mounted")
	}
	dir := filepath.Join(root, fmt.Sprintf("airlock-watch-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
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
	evc, closeEvents, err := watchModified(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		t.Fatal(err)
	}
	defer closeEvents()
	select {
	case e := <-evc:
		t.Fatalf("event %+v before anything changed", e)
	case <-time.After(200 * time.Millisecond):
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-evc:
		if !e.modified || e.err != nil {
			t.Fatalf("event %+v, want a modification", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification after cgroup.events changed (populated 0 → 1)")
	}
}

// Watchers share one inotify instance: more of them than a host's default
// inotify instances per user (128), each told only of its own file.
func TestWatchModifiedManyShareOneInstance(t *testing.T) {
	dir := t.TempDir()
	const n = 200
	chans := make([]<-chan fileEvent, n)
	for i := range chans {
		p := filepath.Join(dir, fmt.Sprintf("f%d", i))
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		c, closeW, err := watchModified(p)
		if err != nil {
			t.Fatalf("watcher %d: %v", i, err)
		}
		defer closeW()
		chans[i] = c
	}
	if err := os.WriteFile(filepath.Join(dir, "f150"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-chans[150]:
		if !e.modified {
			t.Fatalf("event %+v, want a modification", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event for the modified file")
	}
	for i, c := range chans {
		select {
		case e := <-c:
			if i != 150 {
				t.Fatalf("watcher %d got %+v for another file", i, e)
			}
		default:
		}
	}
}
