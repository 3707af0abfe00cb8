//go:build linux

package oomguard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func fakeProc(t *testing.T, procs map[int][2]any) string {
	t.Helper()
	dir := t.TempDir()
	for pid, v := range procs {
		d := filepath.Join(dir, fmt.Sprint(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		status := fmt.Sprintf("Name:\t%s\nState:\tR (running)\nVmRSS:\t%d kB\n", v[0], v[1])
		if err := os.WriteFile(filepath.Join(d, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestCheckKillsLargestOverLimit(t *testing.T) {
	var killed []int
	g := New(100<<20, quiet())
	g.self = 7
	g.kill = func(pid int) error { killed = append(killed, pid); return nil }
	// Under the limit: nothing happens.
	g.proc = fakeProc(t, map[int][2]any{1: {"airlock-envd", 30 << 10}, 7: {"airlock-envd", 20 << 10}, 40: {"python3", 40 << 10}})
	if k := g.Check(); k != nil || len(killed) != 0 {
		t.Fatalf("under the limit: killed %v", killed)
	}
	// Over it: the largest process that is not the agent or init goes,
	// even though init is larger.
	g.proc = fakeProc(t, map[int][2]any{1: {"airlock-envd", 90 << 10}, 40: {"python3", 60 << 10}, 41: {"sleep", 1 << 10}})
	k := g.Check()
	if k == nil || k.PID != 40 || k.Comm != "python3" || len(killed) != 1 || killed[0] != 40 {
		t.Fatalf("over the limit: kill %+v, killed %v; want python3 (40)", k, killed)
	}
	if got, ok := g.Killed(40); !ok || got.RSSBytes != 60<<20 {
		t.Errorf("Killed(40) = %+v %v", got, ok)
	}
	if _, ok := g.Killed(41); ok {
		t.Error("Killed(41) for a process left alone")
	}
	// A /proc/meminfo well below the limit skips the scan; near it, the
	// processes are looked at.
	low := "MemTotal:       1048576 kB\nMemFree:  1000000 kB\nMemAvailable:   1000000 kB\n"
	if err := os.WriteFile(filepath.Join(g.proc, "meminfo"), []byte(low), 0o644); err != nil {
		t.Fatal(err)
	}
	killed = nil
	if k := g.Check(); k != nil || len(killed) != 0 {
		t.Fatalf("meminfo far below the limit: killed %v", killed)
	}
	high := "MemTotal:       1048576 kB\nMemAvailable:   900000 kB\n" // 145 MiB used
	if err := os.WriteFile(filepath.Join(g.proc, "meminfo"), []byte(high), 0o644); err != nil {
		t.Fatal(err)
	}
	if k := g.Check(); k == nil || k.PID != 40 {
		t.Fatalf("meminfo near the limit: kill %+v, want python3 (40)", k)
	}
	// Resident sets over the limit only by counting shared pages twice:
	// the kernel's count (90 MiB used) is below it, nothing is killed.
	shared := "MemTotal:       1048576 kB\nMemAvailable:   956416 kB\n"
	if err := os.WriteFile(filepath.Join(g.proc, "meminfo"), []byte(shared), 0o644); err != nil {
		t.Fatal(err)
	}
	if k := g.Check(); k != nil {
		t.Fatalf("shared pages counted twice: killed %+v", k)
	}
	if err := os.Remove(filepath.Join(g.proc, "meminfo")); err != nil {
		t.Fatal(err)
	}
	// oom_score_adj -1000 exempts a process.
	g.proc = fakeProc(t, map[int][2]any{50: {"server", 80 << 10}, 51: {"worker", 30 << 10}})
	if err := os.WriteFile(filepath.Join(g.proc, "50", "oom_score_adj"), []byte("-1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if k := g.Check(); k == nil || k.PID != 51 {
		t.Fatalf("exempt process: kill %+v, want 51", k)
	}
}

func TestFromEnv(t *testing.T) {
	// The gVisor runtime sets this name in the sandbox's environment
	// (internal/runtime/gvisor/bundle.go, oomGuardEnv).
	if EnvLimit != "AIRLOCK_OOM_GUARD_MB" {
		t.Fatalf("EnvLimit = %q: the gVisor runtime sets AIRLOCK_OOM_GUARD_MB", EnvLimit)
	}
	t.Setenv(EnvLimit, "")
	if FromEnv(quiet()) != nil {
		t.Error("guard on without a limit")
	}
	t.Setenv(EnvLimit, "512")
	if g := FromEnv(quiet()); g == nil || g.LimitBytes() != 512<<20 {
		t.Errorf("FromEnv(512) = %+v", g)
	}
	var nilGuard *Guard
	nilGuard.Run(context.Background()) // a nil guard is off, not a crash
	if _, ok := nilGuard.Killed(1); ok {
		t.Error("nil guard reports kills")
	}
}

// A real memory hog on this host is found in /proc and killed.
func TestRunKillsRealProcess(t *testing.T) {
	cmd := exec.Command("python3", "-c", "b = bytearray(200 * 2**20); import time; time.sleep(60)")
	if err := cmd.Start(); err != nil {
		t.Fatalf("python3: %v", err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	g := New(1, quiet()) // every byte is over the limit
	g.self = os.Getpid()
	target := cmd.Process.Pid
	// Only the hog is a candidate here: judge it alone.
	g.kill = func(pid int) error {
		if pid != target {
			return syscall.ESRCH
		}
		return syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		procs := g.scan()
		var rss uint64
		for _, p := range procs {
			if p.pid == target {
				rss = p.rss
			}
		}
		if rss > 150<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hog never reached 150 MiB resident (%d)", rss)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Make the hog the largest candidate by excluding everything else.
	g.proc = t.TempDir()
	if err := os.Symlink(fmt.Sprintf("/proc/%d", target), filepath.Join(g.proc, fmt.Sprint(target))); err != nil {
		t.Fatal(err)
	}
	if k := g.Check(); k == nil || k.PID != target {
		t.Fatalf("Check = %+v, want the hog %d", k, target)
	}
	err := cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if err == nil || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("hog ended with %v, want SIGKILL", err)
	}
}

// The host kernel's log never names a pid that was not OOM-killed (the
// positive case runs in a microVM: microvm-interpreter.test.mjs).
func TestKernelKilledUnknownPID(t *testing.T) {
	if KernelKilled(0x7ffffffe) {
		t.Error("KernelKilled of an impossible pid")
	}
}

// With a host that wakes it, the guard sleeps while memory is far from the
// limit, and checks every interval near the limit or after a wake-up;
// without one, it always checks every interval.
func TestNextInterval(t *testing.T) {
	g := New(512<<20, quiet())
	cases := []struct {
		name                            string
		hostWakes, haveUsed, recentWake bool
		used                            uint64
		want                            time.Duration
	}{
		{"no host watcher", false, true, false, 10 << 20, DefaultInterval},
		{"idle, far from the limit", true, true, false, 100 << 20, IdleInterval},
		{"half the limit", true, true, false, 256 << 20, DefaultInterval},
		{"just woken", true, true, true, 10 << 20, DefaultInterval},
		{"no meminfo", true, false, false, 0, DefaultInterval},
	}
	for _, c := range cases {
		if got := g.next(c.hostWakes, c.used, c.haveUsed, c.recentWake); got != c.want {
			t.Errorf("%s: next = %v, want %v", c.name, got, c.want)
		}
	}
	t.Setenv(EnvLimit, "512")
	t.Setenv(EnvWake, "SIGUSR2")
	if g := FromEnv(quiet()); g == nil || !g.hostWakes {
		t.Errorf("FromEnv with %s=SIGUSR2: hostWakes off", EnvWake)
	}
	t.Setenv(EnvWake, "")
	if g := FromEnv(quiet()); g == nil || g.hostWakes {
		t.Error("FromEnv without a host watcher: hostWakes on")
	}
}

// An idle guard that the host wakes checks at once, and keeps checking
// every interval for the burst after the wake-up.
func TestLoopWakesOnSignal(t *testing.T) {
	testLoopWakes(t, func(wake chan os.Signal) { wake <- WakeSignal })
}

// The same with the host's datagram (internal/envd/wake calls Wake).
func TestLoopWakesOnDatagram(t *testing.T) {
	testLoopWakes(t, func(chan os.Signal) { Wake() })
}

func testLoopWakes(t *testing.T, wakeUp func(wake chan os.Signal)) {
	g := New(512<<20, quiet())
	g.interval = 5 * time.Millisecond
	g.idle = time.Hour
	g.proc = fakeProc(t, map[int][2]any{1: {"airlock-envd", 10 << 10}})
	low := "MemTotal:       1048576 kB\nMemAvailable:   1000000 kB\n" // ~47 MiB used
	if err := os.WriteFile(filepath.Join(g.proc, "meminfo"), []byte(low), 0o644); err != nil {
		t.Fatal(err)
	}
	killed := make(chan int, 16)
	g.kill = func(pid int) error { killed <- pid; return nil }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake := make(chan os.Signal, 1)
	running.Store(g)
	defer running.CompareAndSwap(g, nil)
	done := make(chan struct{})
	go func() { defer close(done); g.loop(ctx, wake) }()
	// Past the start-up burst the guard sleeps (idle = an hour).
	time.Sleep(wakeBurst + 100*time.Millisecond)
	// Memory jumps over the limit; nothing happens until the host wakes it.
	// (Written into the directory the loop reads, not by swapping g.proc.)
	if err := os.MkdirAll(filepath.Join(g.proc, "50"), 0o755); err != nil {
		t.Fatal(err)
	}
	hogStatus := "Name:\tpython3\nState:\tR (running)\nVmRSS:\t614400 kB\n"
	if err := os.WriteFile(filepath.Join(g.proc, "50", "status"), []byte(hogStatus), 0o644); err != nil {
		t.Fatal(err)
	}
	high := "MemTotal:       1048576 kB\nMemAvailable:   400000 kB\n"
	if err := os.WriteFile(filepath.Join(g.proc, "meminfo"), []byte(high), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case pid := <-killed:
		t.Fatalf("killed %d before any wake-up", pid)
	case <-time.After(200 * time.Millisecond):
	}
	wakeUp(wake)
	select {
	case pid := <-killed:
		if pid != 50 {
			t.Fatalf("killed %d, want 50", pid)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no kill after the wake-up")
	}
	cancel()
	<-done
}

// A request to the agent wakes a sleeping guard (it checks within an
// interval), and it checks every interval while the request runs.
func TestActivityWakesGuard(t *testing.T) {
	g := New(512<<20, quiet())
	g.interval = 5 * time.Millisecond
	g.idle = time.Hour
	g.proc = fakeProc(t, map[int][2]any{1: {"airlock-envd", 10 << 10}})
	low := "MemTotal:       1048576 kB\nMemAvailable:   1000000 kB\n"
	if err := os.WriteFile(filepath.Join(g.proc, "meminfo"), []byte(low), 0o644); err != nil {
		t.Fatal(err)
	}
	killed := make(chan int, 16)
	g.kill = func(pid int) error { killed <- pid; return nil }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	running.Store(g)
	defer running.CompareAndSwap(g, nil)
	done := make(chan struct{})
	go func() { defer close(done); g.loop(ctx, make(chan os.Signal)) }()
	time.Sleep(wakeBurst + 100*time.Millisecond) // asleep now
	end := Activity()
	defer end()
	time.Sleep(50 * time.Millisecond) // the request runs; then memory jumps
	if err := os.MkdirAll(filepath.Join(g.proc, "60"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(g.proc, "60", "status"), []byte("Name:\tpython3\nVmRSS:\t614400 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	high := "MemTotal:       1048576 kB\nMemAvailable:   400000 kB\n"
	if err := os.WriteFile(filepath.Join(g.proc, "meminfo"), []byte(high), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case pid := <-killed:
		if pid != 60 {
			t.Fatalf("killed %d, want 60", pid)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no kill while a request was in progress")
	}
	cancel()
	<-done
}

// A request's start does not check at once (the check would compete with
// the request: reading /proc/meminfo costs 0.5-2.5 ms under gVisor), and
// requests one after the other do not hold the checks off.
func TestActivityChecksWithinInterval(t *testing.T) {
	g := New(512<<20, quiet())
	g.interval = 150 * time.Millisecond
	g.idle = time.Hour
	g.proc = fakeProc(t, map[int][2]any{1: {"airlock-envd", 10 << 10}})
	low := "MemTotal:       1048576 kB\nMemAvailable:   1000000 kB\n"
	if err := os.WriteFile(filepath.Join(g.proc, "meminfo"), []byte(low), 0o644); err != nil {
		t.Fatal(err)
	}
	g.kill = func(int) error { return nil }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	running.Store(g)
	defer running.CompareAndSwap(g, nil)
	done := make(chan struct{})
	go func() { defer close(done); g.loop(ctx, make(chan os.Signal)) }()
	time.Sleep(wakeBurst + activeWindow/10)
	// Asleep now (idle = an hour): wait for the start-up burst's last check.
	for before := g.checks.Load(); ; before = g.checks.Load() {
		time.Sleep(2 * g.interval)
		if g.checks.Load() == before {
			break
		}
	}
	base := g.checks.Load()
	for range 10 {
		Activity()()
		time.Sleep(5 * time.Millisecond)
	}
	if n := g.checks.Load() - base; n != 0 {
		t.Fatalf("%d checks during 10 quick requests (50 ms), want none before the interval", n)
	}
	// Requests every 10 ms for a second: the checks still come every interval.
	base = g.checks.Load()
	for range 100 {
		Activity()()
		time.Sleep(10 * time.Millisecond)
	}
	if n := g.checks.Load() - base; n < 3 {
		t.Fatalf("%d checks in 1 s of requests with a %v interval", n, g.interval)
	}
	cancel()
	<-done
}
