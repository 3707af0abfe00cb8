//go:build linux

package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The agent's OOM guard (internal/envd/oomguard) would have to look at the
// guest's memory every 20 ms to act before the host's memory cgroup stops
// the whole sandbox, and each look wakes gVisor's Sentry: that polling was
// most of what an idle sandbox cost the host. Instead the host watches the
// sandbox's memory cgroup, which costs the sandbox nothing, and signals the
// agent (oomGuardWakeSignal, through `runsc kill`) whenever the cgroup's
// usage grew by memWatchStep since the last signal; the guard, told so by
// oomGuardWakeEnv, then checks at once and every 20 ms for a while, and
// otherwise only while memory is within reach of the limit.
const (
	// memWatchStep is how much a sandbox's host memory may grow before the
	// guard is woken. A memory bomb grows ~100-200 MB per 20 ms here; the
	// guard's headroom (oomGuardHeadroom) is 768 MiB.
	memWatchStep = 32 << 20
	// memWakeMinGap is the shortest time between two wake-ups of one
	// guard: the guard checks every 20 ms for 2 s after each (oomguard's
	// wake burst), so a closer one adds nothing, and a guest that makes its
	// memory swing around a threshold cannot make the host run `runsc
	// kill` more than once a second.
	memWakeMinGap = time.Second
	// memWatchRearm is how often a cgroup v2 watcher whose tripwire is
	// above where it started looks whether usage fell (memory.high has no
	// event for a fall): one read of memory.current on the host, which does
	// not wake the sandbox, and none at all while the sandbox's memory has
	// not grown since the watcher started.
	memWatchRearm = 10 * time.Second
	// oomGuardWakeEnv and its value tell the guard that the host wakes it
	// (internal/envd/oomguard.EnvWake).
	oomGuardWakeEnv = "AIRLOCK_OOM_GUARD_WAKE=SIGUSR2"
	// oomGuardWakeSignal is the signal runsc delivers to the agent (PID 1).
	oomGuardWakeSignal = "USR2"
)

// memWatch is the watcher of one sandbox's memory cgroup.
type memWatch struct {
	stop chan struct{}
	once sync.Once
}

func (w *memWatch) close() { w.once.Do(func() { close(w.stop) }) }

// watchMemory starts watching the memory cgroup of sandbox id for the OOM
// guard, replacing an earlier watcher of id. Without a memory cgroup
// (runsc --ignore-cgroups) there is no host limit to protect and nothing
// is watched.
func (r *Runtime) watchMemory(id string) {
	r.memo.forget(id) // a new start or restore: no earlier sample holds
	w := &memWatch{stop: make(chan struct{})}
	r.mu.Lock()
	if r.watches == nil {
		r.watches = map[string]*memWatch{}
	}
	if old := r.watches[id]; old != nil {
		old.close()
	}
	r.watches[id] = w
	r.mu.Unlock()
	go func() {
		defer func() {
			r.mu.Lock()
			if r.watches[id] == w {
				delete(r.watches, id)
			}
			r.mu.Unlock()
			w.close()
		}()
		err := r.memWatchLoop(id, w.stop)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			r.log.Warn("watching sandbox memory for the OOM guard", "id", id, "err", err)
		}
	}()
}

// ensureWatched starts watching sandbox id, seen running, unless a watcher
// runs: sandboxes that a previous daemon started (State and States see
// them at restart, and every few seconds after).
func (r *Runtime) ensureWatched(id string) {
	r.mu.Lock()
	_, ok := r.watches[id]
	r.mu.Unlock()
	if !ok {
		r.watchMemory(id)
	}
}

// unwatchMemory stops the watcher of id, if any.
func (r *Runtime) unwatchMemory(id string) {
	r.memo.forget(id)
	r.mu.Lock()
	w := r.watches[id]
	delete(r.watches, id)
	r.mu.Unlock()
	if w != nil {
		w.close()
	}
}

// wakeGuard tells the agent of sandbox id to check its memory now: a
// datagram to its wake port, or `runsc kill` (wake.go).
func (r *Runtime) wakeGuard(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if handled, err := r.wake(ctx, id, syscall.SIGUSR2); handled {
		if err != nil && !gone(err) {
			r.log.Debug("waking the OOM guard", "id", id, "err", err)
		}
		return
	}
	if _, err := r.exec(ctx, "kill", id, oomGuardWakeSignal); err != nil && !notFound(err) {
		r.log.Debug("waking the OOM guard", "id", id, "err", err)
	}
}

// gapped returns wake limited to one call per memWakeMinGap (the calls
// in between are dropped).
func gapped(wake func()) func() {
	var last time.Time
	return func() {
		if now := time.Now(); last.IsZero() || now.Sub(last) >= memWakeMinGap {
			last = now
			wake()
		}
	}
}

// memWatchLoop watches until stop is closed or the cgroup is gone (an
// error wrapping os.ErrNotExist).
func (r *Runtime) memWatchLoop(id string, stop <-chan struct{}) error {
	cg := r.cgroupsPath(id)
	v1 := filepath.Join("/sys/fs/cgroup/memory", cg)
	if _, err := os.Stat(filepath.Join(v1, "cgroup.event_control")); err == nil {
		return memWatchThresholds(v1, stop, gapped(func() { r.wakeGuard(id) }))
	}
	v2 := filepath.Join("/sys/fs/cgroup", cg)
	if _, err := os.Stat(filepath.Join(v2, "memory.events")); err == nil {
		return memWatchHigh(v2, stop, gapped(func() { r.wakeGuard(id) }))
	}
	return nil
}

// memWatchThresholds waits on cgroup v1 usage thresholds memWatchStep
// above and below the usage at the last wake-up: the kernel signals an
// eventfd when usage crosses one, so nothing runs while usage stays put.
// wake is called for each crossing upwards.
func memWatchThresholds(dir string, stop <-chan struct{}, wake func()) error {
	usageFile := filepath.Join(dir, "memory.usage_in_bytes")
	base, err := readUint(usageFile)
	if err != nil {
		return err
	}
	var (
		mu     sync.Mutex
		cur    *os.File
		closed bool
	)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-stop:
		case <-done:
			return
		}
		mu.Lock()
		closed = true
		if cur != nil {
			cur.Close()
		}
		mu.Unlock()
	}()
	for {
		ef, err := armThresholds(dir, usageFile, base)
		if err != nil {
			return err
		}
		mu.Lock()
		if closed {
			mu.Unlock()
			ef.Close()
			return nil
		}
		cur = ef
		mu.Unlock()
		var buf [8]byte
		_, rerr := ef.Read(buf[:])
		mu.Lock()
		cur = nil
		mu.Unlock()
		ef.Close()
		if rerr != nil {
			select {
			case <-stop:
				return nil
			default:
				return fmt.Errorf("reading the memory threshold event: %w", rerr)
			}
		}
		// A threshold was crossed, or the cgroup was removed (the kernel
		// signals every event then).
		usage, err := readUint(usageFile)
		if err != nil {
			return err
		}
		if usage > base {
			wake()
		}
		base = usage
	}
}

// armThresholds registers an eventfd for usage crossing base±memWatchStep
// on the cgroup v1 directory dir and returns it (closing it unregisters).
func armThresholds(dir, usageFile string, base uint64) (*os.File, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	ef := os.NewFile(uintptr(efd), "memory-threshold")
	uf, err := os.Open(usageFile)
	if err != nil {
		ef.Close()
		return nil, err
	}
	defer uf.Close()
	ctl, err := os.OpenFile(filepath.Join(dir, "cgroup.event_control"), os.O_WRONLY, 0)
	if err != nil {
		ef.Close()
		return nil, err
	}
	defer ctl.Close()
	levels := []uint64{base + memWatchStep}
	if base > memWatchStep {
		levels = append(levels, base-memWatchStep)
	}
	for _, l := range levels {
		line := strconv.Itoa(efd) + " " + strconv.Itoa(int(uf.Fd())) + " " + strconv.FormatUint(l, 10)
		if _, err := ctl.WriteString(line); err != nil {
			ef.Close()
			if _, serr := os.Stat(usageFile); serr != nil {
				return nil, serr
			}
			return nil, fmt.Errorf("registering a memory threshold: %w", err)
		}
	}
	return ef, nil
}
