// Package oomguard is the agent's user-space OOM killer, for runtimes whose
// guest kernel has none (gVisor: the host's memory cgroup holds the whole
// sandbox, so a guest process that runs out of memory would take the
// sandbox, its files and every other process with it). Every few
// milliseconds it adds up the resident memory of the sandbox's processes;
// over the limit it SIGKILLs the one with the largest resident set (never
// the agent, PID 1, or a process with oom_score_adj -1000), as the Linux
// OOM killer would. The runtime gives the sandbox's host cgroup headroom
// above the limit, so the guard acts before the host does. Kills are kept
// so that the interpreter and the process service can say that a process
// died of memory.
//
// An idle sandbox must not pay for the guard: every check is a wake-up that
// the runtime's kernel serves (gVisor's Sentry, on the host's CPU). When the
// host watches the sandbox's memory cgroup and signals the agent whenever it
// grows (EnvWake), the guard checks every DefaultInterval only while memory
// is within reach of the limit (half of it or more), while the agent serves
// a request and shortly after (Activity), or when it was just woken, and
// otherwise every IdleInterval as a safety net. Without a host watcher
// it checks every DefaultInterval, as before.
package oomguard

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// running is the guard whose Run is active in this process (the agent's).
var running atomic.Pointer[Guard]

// KilledByGuard reports whether the running guard killed pid in the last
// minute (false when no guard runs).
func KilledByGuard(pid int) bool {
	_, ok := running.Load().Killed(pid)
	return ok
}

// EnvLimit is the agent's environment variable that turns the guard on:
// the sandbox's memory limit in MiB.
const EnvLimit = "AIRLOCK_OOM_GUARD_MB"

// EnvWake is the agent's environment variable saying that the host wakes
// the guard whenever the sandbox's memory grows (its value is "SIGUSR2"):
// with a datagram to the agent's wake port (Wake, from internal/envd/wake)
// or, from older daemons and as their fallback, with WakeSignal; the guard
// may then sleep while memory is far from the limit.
const EnvWake = "AIRLOCK_OOM_GUARD_WAKE"

// WakeSignal is the signal the host sends the agent (PID 1) to wake the
// guard.
const WakeSignal = syscall.SIGUSR2

// DefaultInterval is how often memory is checked while it is within reach
// of the limit (or always, without a host watcher).
const DefaultInterval = 20 * time.Millisecond

// IdleInterval is how often memory is checked while it is far from the
// limit and the host wakes the guard on growth: a safety net only.
const IdleInterval = 10 * time.Second

// wakeBurst is how long the guard checks every DefaultInterval after a
// wake-up: an allocation that crossed the host's step may go on.
const wakeBurst = 2 * time.Second

// activeWindow is how long the guard keeps checking every DefaultInterval
// after the agent's last request ended (Activity): a sandbox in use is
// guarded as closely as before, and the host's wake-up, whose latency grows
// with the host's load, is only needed once the sandbox has gone quiet.
const activeWindow = 5 * time.Second

// Activity marks a request to the agent in progress: the running guard
// checks within DefaultInterval from now, and every DefaultInterval until
// done is called and for activeWindow after. Without a running guard it does nothing.
func Activity() (done func()) {
	g := running.Load()
	if g == nil {
		return func() {}
	}
	g.inflight.Add(1)
	select {
	case g.poke <- struct{}{}:
	default:
	}
	return func() {
		g.lastActive.Store(time.Now().UnixNano())
		g.inflight.Add(-1)
	}
}

// Wake wakes the running guard as WakeSignal does: it checks at once and
// every DefaultInterval for a while. Without a running guard it does
// nothing. Repeated calls coalesce.
func Wake() {
	g := running.Load()
	if g == nil {
		return
	}
	select {
	case g.woken <- struct{}{}:
	default:
	}
}

// Kill is one process the guard ended.
type Kill struct {
	PID      int
	Comm     string
	RSSBytes uint64
	Total    uint64 // resident memory of all processes when it was chosen
	Time     time.Time
}

// Guard watches the processes under a proc directory.
type Guard struct {
	limit    uint64
	proc     string
	interval time.Duration
	// idle is the interval while memory is far from the limit, when the
	// host wakes the guard (hostWakes); otherwise unused.
	idle      time.Duration
	hostWakes bool
	// inflight counts the agent's requests in progress, lastActive is when
	// the last one ended (Unix ns), and poke wakes the loop when one
	// starts (Activity).
	inflight   atomic.Int64
	lastActive atomic.Int64
	poke       chan struct{}
	// checks counts the loop's checks (tests).
	checks atomic.Int64
	// woken receives the host's wake-ups that came as a datagram (Wake).
	woken chan struct{}
	self  int
	log   *slog.Logger
	kill  func(pid int) error

	// mu guards kills.
	mu    sync.Mutex
	kills []Kill
}

// New returns a guard for limitBytes of resident memory (nil when
// limitBytes is 0).
func New(limitBytes uint64, log *slog.Logger) *Guard {
	if limitBytes == 0 {
		return nil
	}
	return &Guard{limit: limitBytes, proc: "/proc", interval: DefaultInterval, idle: IdleInterval, self: os.Getpid(), log: log,
		poke: make(chan struct{}, 1), woken: make(chan struct{}, 1), kill: func(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }}
}

// FromEnv returns the guard EnvLimit asks for, or nil.
func FromEnv(log *slog.Logger) *Guard {
	mb, err := strconv.ParseUint(os.Getenv(EnvLimit), 10, 32)
	if err != nil || mb == 0 {
		return nil
	}
	g := New(mb<<20, log)
	g.hostWakes = os.Getenv(EnvWake) == "SIGUSR2"
	return g
}

// Run checks memory until ctx ends: every interval, or, when the host wakes
// the guard (EnvWake), every interval only while memory is within reach of
// the limit or after a wake-up, and every IdleInterval otherwise.
func (g *Guard) Run(ctx context.Context) {
	if g == nil {
		return
	}
	var wake chan os.Signal
	if g.hostWakes {
		wake = make(chan os.Signal, 1)
		signal.Notify(wake, WakeSignal)
		defer signal.Stop(wake)
	}
	g.log.Info("user-space OOM guard on", "limitMB", g.limit>>20, "interval", g.interval, "hostWakes", g.hostWakes)
	running.Store(g)
	defer running.CompareAndSwap(g, nil)
	g.loop(ctx, wake)
}

// loop is Run's loop; a receive on wake (nil: never) is a wake-up.
func (g *Guard) loop(ctx context.Context, wake <-chan os.Signal) {
	fastUntil := time.Now().Add(wakeBurst)
	t := time.NewTimer(g.interval)
	defer t.Stop()
	due := time.Now().Add(g.interval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
			fastUntil = time.Now().Add(wakeBurst)
		case <-g.woken:
			fastUntil = time.Now().Add(wakeBurst)
		case <-g.poke:
			// A request started: the next check comes within interval,
			// not at once, where it would compete with the request (a
			// read of /proc/meminfo costs 0.5-2.5 ms under gVisor).
			if time.Until(due) > g.interval {
				t.Reset(g.interval)
				due = time.Now().Add(g.interval)
			}
			continue
		}
		g.checks.Add(1)
		_, used, haveUsed := g.check()
		now := time.Now()
		recent := now.Before(fastUntil) || g.inflight.Load() > 0 ||
			now.Sub(time.Unix(0, g.lastActive.Load())) < activeWindow
		d := g.next(wake != nil, used, haveUsed, recent)
		t.Reset(d)
		due = now.Add(d)
	}
}

// next is the wait before the following check: the idle interval only when
// the host wakes the guard, no wake-up is recent and the kernel's count of
// used memory is below half the limit.
func (g *Guard) next(hostWakes bool, used uint64, haveUsed, recentWake bool) time.Duration {
	if hostWakes && !recentWake && haveUsed && used < g.limit/2 {
		return g.idle
	}
	return g.interval
}

// Check looks once and kills one process when the total is over the
// limit; it returns the kill, if any. While the kernel's own count of used
// memory (/proc/meminfo) is well below the limit, the processes are not
// scanned: an idle sandbox costs one small read per check.
func (g *Guard) Check() *Kill {
	k, _, _ := g.check()
	return k
}

// check is Check, also returning the kernel's count of used memory (when
// /proc/meminfo has it).
func (g *Guard) check() (*Kill, uint64, bool) {
	used, haveUsed := g.meminfoUsed()
	if haveUsed && used < g.limit/4*3 {
		return nil, used, haveUsed
	}
	procs := g.scan()
	var total uint64
	var victim *proc
	for i := range procs {
		p := &procs[i]
		total += p.rss
		if p.pid == 1 || p.pid == g.self || p.adj == -1000 {
			continue
		}
		if victim == nil || p.rss > victim.rss {
			victim = p
		}
	}
	// Resident sets count pages shared between processes (a second Node
	// or Python process maps the same binary and libraries) once per
	// process; the kernel's own count of used memory does not. The smaller
	// of the two decides, so shared pages never get a process killed.
	if haveUsed && used < total {
		total = used
	}
	if total <= g.limit || victim == nil {
		return nil, used, haveUsed
	}
	if err := g.kill(victim.pid); err != nil && !errors.Is(err, syscall.ESRCH) {
		g.log.Warn("oom guard: kill failed", "pid", victim.pid, "err", err)
		return nil, used, haveUsed
	}
	k := Kill{PID: victim.pid, Comm: victim.comm, RSSBytes: victim.rss, Total: total, Time: time.Now()}
	g.mu.Lock()
	g.kills = append(g.kills, k)
	if len(g.kills) > 64 {
		g.kills = g.kills[len(g.kills)-64:]
	}
	g.mu.Unlock()
	g.log.Warn("out of memory: killed process", "pid", k.PID, "comm", k.Comm, "rssMB", k.RSSBytes>>20,
		"totalMB", total>>20, "limitMB", g.limit>>20)
	return &k, used, haveUsed
}

// Killed reports whether the guard killed pid in the last minute.
func (g *Guard) Killed(pid int) (Kill, bool) {
	if g == nil {
		return Kill{}, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := len(g.kills) - 1; i >= 0; i-- {
		if k := g.kills[i]; k.PID == pid && time.Since(k.Time) < time.Minute {
			return k, true
		}
	}
	return Kill{}, false
}

// LimitBytes is the guarded limit.
func (g *Guard) LimitBytes() uint64 { return g.limit }

// meminfoUsed is MemTotal - MemAvailable from <proc>/meminfo.
func (g *Guard) meminfoUsed() (uint64, bool) {
	b, err := os.ReadFile(filepath.Join(g.proc, "meminfo"))
	if err != nil {
		return 0, false
	}
	var total, avail uint64
	var haveTotal, haveAvail bool
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseUint(string(f[1]), 10, 64)
		if err != nil {
			continue
		}
		switch string(f[0]) {
		case "MemTotal:":
			total, haveTotal = kb<<10, true
		case "MemAvailable:":
			avail, haveAvail = kb<<10, true
		}
	}
	if !haveTotal || !haveAvail || avail > total {
		return 0, false
	}
	return total - avail, true
}

type proc struct {
	pid  int
	comm string
	rss  uint64
	adj  int
}

// scan reads VmRSS and oom_score_adj of every process.
func (g *Guard) scan() []proc {
	ents, err := os.ReadDir(g.proc)
	if err != nil {
		return nil
	}
	out := make([]proc, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join(g.proc, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "status"))
		if err != nil {
			continue
		}
		p := proc{pid: pid}
		for _, line := range bytes.Split(b, []byte("\n")) {
			k, v, ok := bytes.Cut(line, []byte(":"))
			if !ok {
				continue
			}
			switch string(k) {
			case "Name":
				p.comm = string(bytes.TrimSpace(v))
			case "VmRSS":
				f := bytes.Fields(v)
				if len(f) >= 1 {
					kb, _ := strconv.ParseUint(string(f[0]), 10, 64)
					p.rss = kb << 10
				}
			}
		}
		if a, err := os.ReadFile(filepath.Join(dir, "oom_score_adj")); err == nil {
			p.adj, _ = strconv.Atoi(string(bytes.TrimSpace(a)))
		}
		out = append(out, p)
	}
	return out
}
