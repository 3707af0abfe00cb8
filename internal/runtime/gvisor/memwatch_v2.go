//go:build linux

package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cgroup v2 has no usage thresholds (v1's cgroup.event_control), and
// memory.current cannot be waited on. What it can notify is memory.events:
// the kernel counts a "high" event each time the cgroup's usage goes over
// memory.high, and a change of the file is a file-modified event (inotify
// IN_MODIFY, cgroup-v2.rst). So the v2 watcher uses memory.high as a
// tripwire: it keeps it memWatchStep above the usage at the last wake-up,
// and when the kernel reports the crossing it wakes the guard and moves
// the tripwire up. Nothing runs while usage stays put.
//
// memory.high is a soft limit: above it the kernel reclaims from the cgroup
// and, for a large overshoot, delays the allocating task (at most 2 s per
// return to user space). The watcher moves the tripwire as soon as the event
// arrives, so an ordinary allocation sees at most a few milliseconds of that;
// a memory bomb is slowed, which gives the guard more time. The kernel has no
// event for a fall in usage: while the tripwire is above where it was armed
// at the start, the watcher reads memory.current every memWatchRearm and
// lowers the tripwire after a fall (the read is on the host; it does not wake
// the sandbox).

// memWatchHigh watches the cgroup v2 directory dir until stop is closed or
// the cgroup is gone (an error wrapping os.ErrNotExist). wake is called for
// each crossing of the tripwire upwards.
func memWatchHigh(dir string, stop <-chan struct{}, wake func()) error {
	return memWatchHighEvery(dir, stop, wake, memWatchRearm)
}

func memWatchHighEvery(dir string, stop <-chan struct{}, wake func(), rearm time.Duration) error {
	current := filepath.Join(dir, "memory.current")
	high := filepath.Join(dir, "memory.high")
	events := filepath.Join(dir, "memory.events")

	evc, closeEvents, err := watchModified(events)
	if err != nil {
		return err
	}
	defer closeEvents()
	usage, err := readUint(current)
	if err != nil {
		return err
	}
	floor := usage
	if err := setHigh(high, usage+memWatchStep); err != nil {
		return err
	}
	base := usage

	var tick <-chan time.Time
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	arm := func() {
		// The re-arm timer runs only while the tripwire is above where
		// the watcher started (usage grew since), so that an idle sandbox
		// costs no timer at all.
		if base <= floor {
			tick = nil
			return
		}
		if timer == nil {
			timer = time.NewTimer(rearm)
		} else {
			timer.Reset(rearm)
		}
		tick = timer.C
	}
	for {
		select {
		case <-stop:
			// The sandbox is being deleted, or a new watcher (a
			// restore) replaces this one and sets its own tripwire:
			// resetting memory.high here could undo the new one's.
			return nil
		case e := <-evc:
			if e.err != nil {
				select {
				case <-stop:
					return nil
				default:
				}
				return fmt.Errorf("reading memory.events notifications: %w", e.err)
			}
			if e.gone {
				return fmt.Errorf("%s: %w", dir, os.ErrNotExist)
			}
			if !e.modified {
				continue
			}
			usage, err := readUint(current)
			if err != nil {
				return err
			}
			if usage >= base+memWatchStep {
				// Move the tripwire first: the kernel holds back the
				// cgroup's allocations while usage is above it.
				if err := setHigh(high, usage+memWatchStep); err != nil {
					return err
				}
				base = usage
				wake()
				arm()
			}
			// Other changes of memory.events (max, oom, oom_kill) need
			// nothing from the watcher.
		case <-tick:
			usage, err := readUint(current)
			if err != nil {
				return err
			}
			if usage+memWatchStep <= base {
				if err := setHigh(high, usage+memWatchStep); err != nil {
					return err
				}
				base = usage
			}
			arm()
		}
	}
}

// fileEvent is what watchModified reports: the file changed, or it is gone
// (the cgroup was removed), or reading the notifications failed.
type fileEvent struct {
	modified, gone bool
	err            error
}

// watchModified reports the file-modified events of path (inotify, which
// kernfs raises for cgroup files that notify, like memory.events and
// cgroup.events) until close is called or the file is gone. All watchers
// share one inotify instance (a host allows 128 per user by default,
// fs.inotify.max_user_instances; watches are plentiful), read in Go's
// poller: no thread is held per watcher.
func watchModified(path string) (<-chan fileEvent, func(), error) {
	return inotifyWatches.add(path)
}

// inotifyWatches is the process's shared inotify instance.
var inotifyWatches = &inotifyHub{}

// inotifyHub dispatches the events of one inotify instance by watch.
type inotifyHub struct {
	// mu guards the fields below. The instance is made at the first add
	// and kept for the life of the process.
	mu   sync.Mutex
	file *os.File
	fd   int
	subs map[int32]*inotifySub
}

// inotifySub is one watch's subscriber.
type inotifySub struct {
	c    chan fileEvent
	done chan struct{}
}

func (h *inotifyHub) add(path string) (<-chan fileEvent, func(), error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.file == nil {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
		if err != nil {
			return nil, nil, fmt.Errorf("inotify: %w", err)
		}
		h.fd, h.file, h.subs = fd, os.NewFile(uintptr(fd), "inotify"), map[int32]*inotifySub{}
		go h.read()
	}
	// IN_IGNORED comes by itself when the file (the cgroup) is removed.
	wd, err := unix.InotifyAddWatch(h.fd, path, unix.IN_MODIFY)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil, fmt.Errorf("watching %s: %w", path, os.ErrNotExist)
		}
		return nil, nil, fmt.Errorf("watching %s: %w", path, err)
	}
	sub := &inotifySub{c: make(chan fileEvent, 1), done: make(chan struct{})}
	h.subs[int32(wd)] = sub
	var once sync.Once
	return sub.c, func() {
		once.Do(func() {
			close(sub.done)
			h.mu.Lock()
			if h.subs[int32(wd)] == sub {
				delete(h.subs, int32(wd))
				_, _ = unix.InotifyRmWatch(h.fd, uint32(wd))
			}
			h.mu.Unlock()
		})
	}, nil
}

// read dispatches events. A subscriber that has not taken its last event
// has it merged with the next (the channel holds one): a watcher only needs
// to know that something changed since it last looked.
func (h *inotifyHub) read() {
	buf := make([]byte, 64*1024)
	for {
		n, err := h.file.Read(buf)
		if err != nil {
			h.mu.Lock()
			for wd, sub := range h.subs {
				deliver(sub, fileEvent{err: err})
				delete(h.subs, wd)
			}
			h.file = nil
			h.mu.Unlock()
			return
		}
		h.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ie := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += unix.SizeofInotifyEvent + int(ie.Len)
			sub := h.subs[ie.Wd]
			if sub == nil {
				continue
			}
			e := fileEvent{modified: ie.Mask&unix.IN_MODIFY != 0, gone: ie.Mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF) != 0}
			deliver(sub, e)
			if e.gone {
				delete(h.subs, ie.Wd)
			}
		}
		h.mu.Unlock()
	}
}

// deliver hands e to sub without blocking the hub, merged with an event
// not yet taken.
func deliver(sub *inotifySub, e fileEvent) {
	for {
		select {
		case <-sub.done:
			return
		case sub.c <- e:
			return
		default:
		}
		select {
		case old := <-sub.c:
			e.modified = e.modified || old.modified
			e.gone = e.gone || old.gone
			if e.err == nil {
				e.err = old.err
			}
		default:
		}
	}
}

// setHigh writes the tripwire v (bytes, rounded down to a page by the
// kernel) to the memory.high file path.
func setHigh(path string, v uint64) error {
	if err := os.WriteFile(path, []byte(strconv.FormatUint(v, 10)), 0o644); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return err
		}
		return fmt.Errorf("setting the memory tripwire %s: %w", path, err)
	}
	return nil
}
