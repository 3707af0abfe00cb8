//go:build linux

package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The agent is PID 1 inside a sandbox, so orphaned grandchildren are
// re-parented to it and must be reaped. Reaping blindly (wait4(-1)) would
// steal exit statuses from os/exec, so the reaper only collects zombies that
// are (a) not started by this package and (b) have stayed zombies across two
// scans at least orphanAge apart — a child someone waits for is reaped by its
// waiter immediately, so a lingering zombie has nobody waiting for it.

// orphanAge is how long a zombie must linger before the reaper collects it.
const orphanAge = 500 * time.Millisecond

var (
	// trackMu guards tracked.
	trackMu sync.Mutex
	tracked = map[int]struct{}{}
)

// startTracked starts cmd and records its pid so the reaper leaves it to
// cmd.Wait.
func startTracked(cmd *exec.Cmd) error {
	trackMu.Lock()
	defer trackMu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	tracked[cmd.Process.Pid] = struct{}{}
	return nil
}

func untrack(pid int) {
	trackMu.Lock()
	delete(tracked, pid)
	trackMu.Unlock()
}

func isTracked(pid int) bool {
	trackMu.Lock()
	defer trackMu.Unlock()
	_, ok := tracked[pid]
	return ok
}

// Reaper collects orphaned zombie children of this process.
type Reaper struct {
	log *slog.Logger
	// seen maps a zombie pid to when it was first seen; only the goroutine
	// running Run or ReapOnce touches it.
	seen map[int]time.Time
	// peeks and scans count zombiePending and ReapOnce calls (tests).
	peeks, scans atomic.Int64
}

// NewReaper returns a Reaper; call Run (when PID 1 or a child subreaper).
func NewReaper(log *slog.Logger) *Reaper {
	return &Reaper{log: log, seen: map[int]time.Time{}}
}

// idleRescan is how often the reaper scans with no zombie pending: a safety
// net only (every orphan that exits sends SIGCHLD), slow so that an idle
// sandbox is not woken.
const idleRescan = time.Minute

// settle is how long after a SIGCHLD the reaper looks: the exit of a
// process the agent started is reaped by its own waiter by then, and the
// look is off the path that reports that exit (the scan of /proc costs 2-5
// ms under gVisor and competed with every command's end). An orphan waits
// orphanAge anyway.
const settle = 100 * time.Millisecond

// Run reaps until ctx ends: settle after a SIGCHLD (several coalesce), again
// orphanAge later while a zombie is pending, and otherwise every idleRescan.
// /proc is scanned only when a zombie child exists.
func (r *Reaper) Run(ctx context.Context) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	t := time.NewTimer(idleRescan)
	defer t.Stop()
	due := time.Now().Add(idleRescan)
	for {
		select {
		case <-ctx.Done():
			return
		case <-sigs:
			if time.Until(due) > settle {
				t.Reset(settle)
				due = time.Now().Add(settle)
			}
			continue
		case <-t.C:
		}
		if r.zombiePending() {
			r.ReapOnce(time.Now())
		} else {
			clear(r.seen)
		}
		d := r.nextScan()
		t.Reset(d)
		due = time.Now().Add(d)
	}
}

// zombiePending reports whether any child of this process has exited and
// is not reaped yet (waitid with WNOWAIT: nothing is collected); true when
// it cannot tell.
func (r *Reaper) zombiePending() bool {
	r.peeks.Add(1)
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if errors.Is(err, unix.ECHILD) {
		return false
	}
	return err != nil || info.Signo != 0
}

// nextScan is the wait before the next scan without a SIGCHLD: orphanAge
// while a zombie seen waits for its age, else idleRescan.
func (r *Reaper) nextScan() time.Duration {
	if len(r.seen) > 0 {
		return orphanAge
	}
	return idleRescan
}

// ReapOnce scans /proc once and reaps the orphaned zombies that have lingered
// for orphanAge. It returns how many it reaped.
func (r *Reaper) ReapOnce(now time.Time) int {
	r.scans.Add(1)
	zombies, err := zombieChildren(os.Getpid())
	if err != nil {
		r.log.Warn("scanning for zombies", "error", err)
		return 0
	}
	present := make(map[int]bool, len(zombies))
	n := 0
	for _, pid := range zombies {
		present[pid] = true
		if isTracked(pid) {
			continue
		}
		first, ok := r.seen[pid]
		if !ok {
			r.seen[pid] = now
			continue
		}
		if now.Sub(first) < orphanAge {
			continue
		}
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if err == nil && got == pid {
			n++
			delete(r.seen, pid)
			r.log.Debug("reaped orphan", "pid", pid, "status", int(ws))
		}
	}
	for pid := range r.seen {
		if !present[pid] {
			delete(r.seen, pid)
		}
	}
	return n
}

// zombieChildren lists pids in state Z whose parent is ppid.
func zombieChildren(ppid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("reading /proc: %w", err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		state, parent, err := readStat(pid)
		if err != nil {
			continue // raced with exit
		}
		if state == 'Z' && parent == ppid {
			out = append(out, pid)
		}
	}
	return out, nil
}

// readStat returns the state and parent pid from /proc/<pid>/stat.
func readStat(pid int) (byte, int, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	// "pid (comm) S ppid ..." — comm may contain spaces and parens.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, errors.New("malformed stat")
	}
	fields := bytes.Fields(b[i+2:])
	if len(fields) < 2 || len(fields[0]) != 1 {
		return 0, 0, errors.New("malformed stat")
	}
	ppid, err := strconv.Atoi(string(fields[1]))
	if err != nil {
		return 0, 0, fmt.Errorf("parsing ppid: %w", err)
	}
	return fields[0][0], ppid, nil
}
