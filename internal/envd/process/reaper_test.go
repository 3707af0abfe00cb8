//go:build linux

package process

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// runReaper makes the test process a child subreaper (as the agent, PID 1,
// is a reaper) and runs a Reaper until the test ends.
func runReaper(t *testing.T) *Reaper {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot become a subreaper: %v", err)
	}
	r := NewReaper(slog.Default())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	})
	return r
}

func runTracked(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := startTracked(cmd); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// TestReaperLeavesWaitedChildrenAlone: the exits of processes the agent
// waits for are reported with their status, and cost the reaper no scan of
// /proc (it looks settle after the SIGCHLD, when they are reaped already).
func TestReaperLeavesWaitedChildrenAlone(t *testing.T) {
	r := runReaper(t)
	const n = 10
	for i := range n {
		cmd := runTracked(t, "/bin/sh", "-c", "exit "+strconv.Itoa(i+1))
		err := cmd.Wait()
		untrack(cmd.Process.Pid)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != i+1 {
			t.Fatalf("exit status of child %d: %v", i, err)
		}
		time.Sleep(30 * time.Millisecond) // one SIGCHLD each, not coalesced
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.peeks.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(2 * settle)
	if r.peeks.Load() == 0 {
		t.Fatal("the reaper never looked after the SIGCHLDs")
	}
	t.Logf("scans %d peeks %d", r.scans.Load(), r.peeks.Load())
	if s := r.scans.Load(); s > 2 {
		t.Fatalf("%d scans of /proc for %d waited children (want none: no zombie was left)", s, n)
	}
}

// TestReaperCollectsOrphans: a grandchild whose parent exited is
// re-parented to the reaper and collected once it has lingered orphanAge.
func TestReaperCollectsOrphans(t *testing.T) {
	runReaper(t)
	cmd := exec.Command("/bin/sh", "-c", "sleep 0.2 & echo $!")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return // reaped
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d not reaped after 5 s: %s", pid, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
