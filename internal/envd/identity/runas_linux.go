//go:build linux

package identity

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// RunAs runs fn on an OS thread whose effective uid, gid and supplementary
// groups are those of u, so the kernel enforces u's file permissions and
// everything fn creates is owned by u. Such a thread is never returned to the
// Go scheduler, so the changed credentials cannot leak into other goroutines:
// it runs only RunAs calls for the same credentials, one at a time, and ends
// with its goroutine.
//
// Threads are kept for reuse (at most maxIdlePerCreds idle ones per set of
// credentials, maxIdle in all): under gVisor starting and ending a thread
// per call cost about 0.5 ms of every command start and file request. A
// call that finds no idle thread starts one, so calls as the same user still
// run in parallel.
//
// Only the calling thread changes (raw setresuid/setresgid/setgroups, not the
// all-threads variants of package syscall). When the agent already runs as u,
// or u is nil, fn runs directly. A non-root agent cannot switch users and gets
// an error.
func RunAs(u *User, fn func() error) error {
	if u == nil || (uint32(os.Geteuid()) == u.UID && uint32(os.Getegid()) == u.GID) {
		return fn()
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("acting as user %q: agent is not running as root", u.Name)
	}
	key := credsKey(u)
	w := threads.take(key)
	if w == nil {
		var err error
		if w, err = startThread(u); err != nil {
			return err
		}
	}
	errc := make(chan error, 1)
	w.work <- func() {
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("panic while acting as user %q: %v", u.Name, r)
			}
		}()
		errc <- fn()
	}
	err := <-errc
	threads.put(key, w)
	return err
}

// Bounds of the idle threads RunAs keeps.
const (
	maxIdlePerCreds = 2
	maxIdle         = 16
)

// credThread is an OS thread switched to one set of credentials; it runs the
// functions sent on work until work is closed.
type credThread struct{ work chan func() }

// threadPool holds idle credThreads by credentials (credsKey).
type threadPool struct {
	mu   sync.Mutex
	idle map[string][]*credThread
	n    int // idle threads in all
}

var threads = &threadPool{idle: map[string][]*credThread{}}

func (p *threadPool) take(key string) *credThread {
	p.mu.Lock()
	defer p.mu.Unlock()
	ts := p.idle[key]
	if len(ts) == 0 {
		return nil
	}
	w := ts[len(ts)-1]
	if len(ts) == 1 {
		delete(p.idle, key)
	} else {
		p.idle[key] = ts[:len(ts)-1]
	}
	p.n--
	return w
}

// put keeps w for the next call with the same credentials, or ends its
// thread when enough are idle.
func (p *threadPool) put(key string, w *credThread) {
	p.mu.Lock()
	if len(p.idle[key]) < maxIdlePerCreds && p.n < maxIdle {
		p.idle[key] = append(p.idle[key], w)
		p.n++
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	close(w.work)
}

// idleCount is the number of idle threads kept (for tests).
func (p *threadPool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// credsKey names u's credentials as the thread gets them.
func credsKey(u *User) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d:%d", u.UID, u.GID)
	for _, g := range u.Groups {
		fmt.Fprintf(&b, ",%d", g)
	}
	return b.String()
}

// startThread starts a goroutine locked to a new OS thread with u's
// credentials.
func startThread(u *User) (*credThread, error) {
	w := &credThread{work: make(chan func())}
	started := make(chan error, 1)
	go func() {
		// Deliberately never unlocked: the thread is discarded when this
		// goroutine returns.
		runtime.LockOSThread()
		if err := switchThreadCreds(u); err != nil {
			started <- fmt.Errorf("switching thread to user %q: %w", u.Name, err)
			return
		}
		started <- nil
		for fn := range w.work {
			fn()
		}
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return w, nil
}

// switchThreadCreds changes the calling thread's groups, egid and euid. The
// saved ids stay 0; the thread is thrown away afterwards anyway.
func switchThreadCreds(u *User) error {
	groups := make([]uint32, 0, len(u.Groups)+1)
	groups = append(groups, u.GID)
	for _, g := range u.Groups {
		if g != u.GID {
			groups = append(groups, g)
		}
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0); errno != 0 {
		return fmt.Errorf("setgroups: %w", errno)
	}
	keep := ^uintptr(0) // -1: leave unchanged
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(u.GID), keep); errno != 0 {
		return fmt.Errorf("setresgid: %w", errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(u.UID), keep); errno != 0 {
		return fmt.Errorf("setresuid: %w", errno)
	}
	return nil
}

// Runner runs functions as one user on one long-lived OS thread, for work
// that acts as the user many times (a watcher's adds and stats, one per
// event): RunAs would start and throw away a thread each time. Close ends
// the thread. When no switch is needed, Do runs functions directly.
type Runner struct {
	work chan func()
	done chan struct{}
	once sync.Once
}

// NewRunner starts a Runner acting as u (see RunAs for when no switch is
// needed and when it fails).
func NewRunner(u *User) (*Runner, error) {
	if u == nil || (uint32(os.Geteuid()) == u.UID && uint32(os.Getegid()) == u.GID) {
		return &Runner{}, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("acting as user %q: agent is not running as root", u.Name)
	}
	r := &Runner{work: make(chan func()), done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, with its changed credentials, exits
		// with this goroutine.
		runtime.LockOSThread()
		if err := switchThreadCreds(u); err != nil {
			started <- fmt.Errorf("switching thread to user %q: %w", u.Name, err)
			return
		}
		started <- nil
		for {
			select {
			case fn := <-r.work:
				fn()
			case <-r.done:
				return
			}
		}
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return r, nil
}

// Do runs fn as the Runner's user and returns its error. After Close it
// refuses to run anything.
func (r *Runner) Do(fn func() error) error {
	if r.work == nil {
		return fn()
	}
	errc := make(chan error, 1)
	call := func() {
		defer func() {
			if p := recover(); p != nil {
				errc <- fmt.Errorf("panic while acting as a user: %v", p)
			}
		}()
		errc <- fn()
	}
	select {
	case r.work <- call:
		return <-errc
	case <-r.done:
		return errRunnerClosed
	}
}

var errRunnerClosed = errors.New("acting as a user: runner closed")

// Close ends the Runner's thread; it is safe to call more than once.
func (r *Runner) Close() {
	if r.done != nil {
		r.once.Do(func() { close(r.done) })
	}
}
