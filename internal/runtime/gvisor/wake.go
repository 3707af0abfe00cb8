//go:build linux

package gvisor

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// The agent is woken (SIGUSR1 after a restore, SIGUSR2 for the OOM guard)
// with a datagram to its wake port (internal/guest.Wake), not with
// `runsc kill`: that spawns a Go process, ~10 ms of CPU but 1.4–1.7 s of
// wall time on a loaded host. `runsc kill` stays the fallback when the
// sandbox's address is unknown, when nothing listens on the port (an agent
// older than it: the sandbox answers "port unreachable" at once), and
// alongside the datagram when no echo came within wakeTimeout.

// wakeTimeout is how long the datagram is re-sent alone before `runsc
// kill` joins it; wakeGiveUp is when it stops.
// (Variables for the tests.)
var (
	wakeTimeout = 2 * time.Second
	wakeGiveUp  = 20 * time.Second
)

// wakeMessages maps the signals the agent handles to their datagrams.
var wakeMessages = map[syscall.Signal]string{
	syscall.SIGUSR1: guest.WakeThaw,
	syscall.SIGUSR2: guest.WakeOOM,
}

// guestAddrs is the address of each sandbox that this runtime started or
// restored with one (Spec.GuestAddr), by id.
type guestAddrs struct {
	// port is the agent's wake port (0: guest.WakePort; tests set another).
	port uint16
	// mu guards m and saved.
	mu sync.Mutex
	m  map[string]netip.Addr
	// saved holds the sandboxes being checkpointed or checkpointed (with
	// their address, for a checkpoint that fails), or stopped (Stop): their
	// tasks are stopped or dying, so growing memory is the checkpoint's own
	// and the OOM guard has nothing to check.
	saved map[string]netip.Addr
}

func (a *guestAddrs) set(id string, addr netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.saved, id)
	if !addr.IsValid() {
		delete(a.m, id)
		return
	}
	if a.m == nil {
		a.m = map[string]netip.Addr{}
	}
	a.m[id] = addr
}

func (a *guestAddrs) get(id string) (netip.Addr, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	addr, ok := a.m[id]
	return addr, ok
}

func (a *guestAddrs) forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, id)
	delete(a.saved, id)
}

// saving marks id as being checkpointed until a Start or Restore sets its
// address again; undo (for a checkpoint that failed: the sandbox runs on)
// puts its address back.
func (a *guestAddrs) saving(id string) (undo func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.saved == nil {
		a.saved = map[string]netip.Addr{}
	}
	a.saved[id] = a.m[id]
	delete(a.m, id)
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if addr, ok := a.saved[id]; ok {
			delete(a.saved, id)
			if addr.IsValid() {
				a.m[id] = addr
			}
		}
	}
}

func (a *guestAddrs) isSaved(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.saved[id]
	return ok
}

// wakeCounts counts how the agents were woken.
type wakeCounts struct {
	datagram, runsc atomic.Int64
}

// WakeCounts reports how many agent wake-ups (SIGUSR1/SIGUSR2) the agent
// answered by datagram, and how many `runsc kill` fallbacks were started
// (one wake-up may count in both: a slow answer and a kill alongside).
func (r *Runtime) WakeCounts() (datagram, runsc int64) {
	return r.wakes.datagram.Load(), r.wakes.runsc.Load()
}

// wake wakes the agent of sandbox id for sig (SIGUSR1, SIGUSR2) with a
// datagram. handled false means: send sig with `runsc kill` now (no
// address, nothing on the wake port, another signal; each such fallback is
// logged). When no answer came within wakeTimeout, `runsc kill` runs
// alongside while the datagram is still re-sent (up to wakeGiveUp), and
// whichever takes effect first ends the wait: a loaded host makes both
// slow, and the slower must not add to the faster.
func (r *Runtime) wake(ctx context.Context, id string, sig syscall.Signal) (handled bool, err error) {
	msg, ok := wakeMessages[sig]
	if !ok {
		return false, nil
	}
	if sig == syscall.SIGUSR2 && r.addrs.isSaved(id) {
		// Being checkpointed or saved: no guest task runs, nothing to guard.
		r.log.Debug("not waking the OOM guard of a sandbox being checkpointed", "id", id)
		return true, nil
	}
	addr, ok := r.addrs.get(id)
	port := r.addrs.port
	if port == 0 {
		port = guest.WakePort
	}
	if !ok {
		r.wakeFallback(id, sig, "the sandbox's address is unknown")
		return false, nil
	}
	t0 := time.Now()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answered := make(chan error, 1)
	go func() {
		answered <- guest.WakeAt(wctx, netip.AddrPortFrom(addr.Unmap(), port), msg, wakeGiveUp)
	}()
	timer := time.NewTimer(wakeTimeout)
	defer timer.Stop()
	select {
	case err := <-answered:
		if err == nil {
			r.wakes.datagram.Add(1)
			r.log.Debug("agent woken by datagram", "id", id, "signal", sig, "took", time.Since(t0))
			return true, nil
		}
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		r.wakeFallback(id, sig, err.Error())
		return false, nil
	case <-timer.C:
	}
	r.wakeFallback(id, sig, fmt.Sprintf("no answer to the wake datagram (%s) within %v; runsc kill alongside", addr, wakeTimeout))
	killed := make(chan error, 1)
	go func() { killed <- r.kill(ctx, id, sig) }()
	select {
	case err := <-answered:
		if err == nil {
			r.wakes.datagram.Add(1)
			return true, nil
		}
		return true, <-killed
	case err := <-killed:
		return true, err
	}
}

// kill sends sig to the agent of sandbox id with `runsc kill`.
func (r *Runtime) kill(ctx context.Context, id string, sig syscall.Signal) error {
	if _, err := r.exec(ctx, "kill", id, strconv.Itoa(int(sig))); err != nil {
		if notFound(err) {
			return runtime.ErrNotFound
		}
		return fmt.Errorf("runsc kill %s %d: %w", id, sig, err)
	}
	return nil
}

var _ runtime.GuestAddrKeeper = (*Runtime)(nil)

// KeepGuestAddr implements runtime.GuestAddrKeeper: the agent of sandbox id
// (started by a previous daemon) is woken at addr.
func (r *Runtime) KeepGuestAddr(id string, addr netip.Addr) { r.addrs.set(id, addr) }

// gone reports whether err says that the sandbox no longer exists.
func gone(err error) bool { return errors.Is(err, runtime.ErrNotFound) }

// wakeFallback counts and logs one wake-up that goes through `runsc kill`.
func (r *Runtime) wakeFallback(id string, sig syscall.Signal, reason string) {
	r.wakes.runsc.Add(1)
	r.log.Info("waking the agent with runsc kill", "id", id, "signal", sig.String(), "reason", reason)
}
