//go:build linux

package filesystem

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// feedMask is what the activity feed's watch asks inotify for: what
// fsnotify asks for minus IN_ATTRIB (the feed reports no CHMOD).
const feedMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_DELETE_SELF |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_MOVE_SELF

// feedBatchPause is how long the reader waits after a read before the
// next one (the feed's entries come at most that much later).
const feedBatchPause = 20 * time.Millisecond

// rawEvent is one inotify event as read, before its watch is resolved.
type rawEvent struct {
	wd           int32
	mask, cookie uint32
	name         string
}

// inoWatcher is a raw inotify watch for the activity feed's WatchDir
// (filefeed.Header). Unlike fsnotify it keeps the event mask, so IN_ISDIR
// tells that a created or moved-in entry is a directory needing a watch
// (no lstat per create), and IN_Q_OVERFLOW is seen as such. One goroutine
// reads the inotify fd and hands over each read as a batch; the consumer
// resolves watches (resolve) and adds new ones.
type inoWatcher struct {
	file   *os.File
	fd     int
	events chan []rawEvent
	errors chan error
	done   chan struct{} // closed by Close
	once   sync.Once
	// resumeAt (UnixNano; 0: none) is when the reader may read again
	// (holdFor): while the feed's rate cap is used up, every event would
	// be dropped, so they wait in the kernel's queue and are read, and
	// counted, in one go when the cap's window ends.
	resumeAt atomic.Int64

	// mu guards the watch maps (resolve runs on the consumer, add also on
	// the identity.Runner's thread).
	mu     sync.Mutex
	byWd   map[int32]string
	byPath map[string]int32
	// movedFrom: directories reported moved away (cookie → path) whose
	// IN_MOVED_TO has not come (yet): when their IN_MOVE_SELF arrives
	// without it, they left the tree and their watches go.
	movedFrom map[uint32]string
}

func newInoWatcher() (*inoWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	w := &inoWatcher{
		file: os.NewFile(uintptr(fd), "inotify"), fd: fd,
		events: make(chan []rawEvent, 4), errors: make(chan error, 1), done: make(chan struct{}),
		byWd: map[int32]string{}, byPath: map[string]int32{}, movedFrom: map[uint32]string{},
	}
	go w.read()
	return w, nil
}

// add watches dir (one directory). A directory already watched under
// another path (moved) keeps its watch, now under dir.
func (w *inoWatcher) add(dir string) error {
	wd, err := unix.InotifyAddWatch(w.fd, dir, feedMask)
	if err != nil {
		return fmt.Errorf("inotify_add_watch %s: %w", dir, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.byWd[int32(wd)]; ok && old != dir && w.byPath[old] == int32(wd) {
		delete(w.byPath, old)
	}
	w.byWd[int32(wd)] = dir
	w.byPath[dir] = int32(wd)
	return nil
}

// holdFor keeps the reader from reading for d (it finishes a read under
// way).
func (w *inoWatcher) holdFor(d time.Duration) {
	w.resumeAt.Store(time.Now().Add(d).UnixNano())
}

// Bounds of a hold: every holdCheck the reader looks at how much the
// kernel has queued, and ends the hold early past holdMaxQueued bytes
// (Linux drops events past fs.inotify.max_queued_events, 16384 by
// default: about 512 KiB of events with short names; gVisor keeps them
// all).
const (
	holdCheck     = 200 * time.Millisecond
	holdMaxQueued = 256 << 10
)

// waitHold waits out a hold (holdFor); false when the watcher closed.
func (w *inoWatcher) waitHold() bool {
	for {
		d := time.Until(time.Unix(0, w.resumeAt.Load()))
		if d <= 0 {
			return true
		}
		t := time.NewTimer(min(d, holdCheck))
		select {
		case <-t.C:
		case <-w.done:
			t.Stop()
			return false
		}
		// SIOCINQ is FIONREAD: the bytes queued.
		if n, err := unix.IoctlGetInt(w.fd, unix.SIOCINQ); err == nil && n >= holdMaxQueued {
			return true
		}
	}
}

// Close stops the reader (it closes events and errors) and every watch.
func (w *inoWatcher) Close() error {
	w.once.Do(func() { close(w.done) })
	return w.file.Close()
}

func (w *inoWatcher) read() {
	defer close(w.events)
	defer close(w.errors)
	buf := make([]byte, unix.SizeofInotifyEvent*4096)
	for {
		if !w.waitHold() {
			return
		}
		n, err := w.file.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				select {
				case w.errors <- fmt.Errorf("reading inotify events: %w", err):
				default:
				}
			}
			return
		}
		var batch []rawEvent
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ie := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			end := off + unix.SizeofInotifyEvent + int(ie.Len)
			if end > n {
				break
			}
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:end]), "\x00")
			batch = append(batch, rawEvent{wd: ie.Wd, mask: ie.Mask, cookie: ie.Cookie, name: name})
			off = end
		}
		if len(batch) > 0 {
			select {
			case w.events <- batch:
			case <-w.done:
				return
			}
		}
		// Let events gather: one read, one wake-up of the consumer and one
		// flush to the host per batch rather than per event.
		select {
		case <-time.After(feedBatchPause):
		case <-w.done:
			return
		}
	}
}

// resolved is a raw event made into fsnotify's terms.
type resolved struct {
	ev    fsnotify.Event
	isDir bool
	// overflow: the kernel's queue overflowed, events were lost.
	overflow bool
}

// resolve turns a raw event into the event fsnotify would have given for
// a watch on each directory (Name is the watch's path joined with the
// event's name; Op from the mask), keeping the watch maps as fsnotify
// does: IN_IGNORED and IN_UNMOUNT drop the watch, IN_DELETE_SELF of a
// directory whose parent is watched is left to the parent's IN_DELETE.
// Differences, all for directories: IN_MOVE_SELF of a directory whose
// parent is watched gives no second Rename (the parent's IN_MOVED_FROM
// gave one), the watch is kept when the directory moved within the tree
// (its IN_MOVED_TO re-adds it under the new path) and dropped, with the
// watches below it, when it left the tree. ok is false when there is no
// event to report.
func (w *inoWatcher) resolve(re rawEvent) (r resolved, ok bool) {
	if re.mask&unix.IN_Q_OVERFLOW != 0 {
		return resolved{overflow: true}, true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	path, known := w.byWd[re.wd]
	if !known {
		return r, false
	}
	name := path
	if re.name != "" {
		name += "/" + re.name
	}
	isDir := re.mask&unix.IN_ISDIR != 0
	if re.mask&(unix.IN_IGNORED|unix.IN_UNMOUNT) != 0 {
		w.forget(re.wd, path)
		return r, false
	}
	parentWatched := false
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		parent := path[:i]
		if parent == "" {
			parent = "/"
		}
		_, parentWatched = w.byPath[parent]
	}
	if re.mask&unix.IN_DELETE_SELF != 0 {
		w.forget(re.wd, path)
		if parentWatched {
			return r, false
		}
	}
	if re.mask&unix.IN_MOVE_SELF != 0 {
		left := false
		for c, p := range w.movedFrom {
			if p == path {
				left = true
				delete(w.movedFrom, c)
			}
		}
		if left {
			w.forgetTree(path)
		}
		if parentWatched {
			return r, false
		}
	}
	if isDir && re.cookie != 0 {
		switch {
		case re.mask&unix.IN_MOVED_FROM != 0:
			if len(w.movedFrom) >= 64 {
				clear(w.movedFrom)
			}
			w.movedFrom[re.cookie] = name
		case re.mask&unix.IN_MOVED_TO != 0:
			if old, ok := w.movedFrom[re.cookie]; ok {
				delete(w.movedFrom, re.cookie)
				w.rebase(old, name)
			}
		}
	}
	var op fsnotify.Op
	if re.mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
		op |= fsnotify.Create
	}
	if re.mask&(unix.IN_DELETE_SELF|unix.IN_DELETE) != 0 {
		op |= fsnotify.Remove
	}
	if re.mask&unix.IN_MODIFY != 0 {
		op |= fsnotify.Write
	}
	if re.mask&(unix.IN_MOVE_SELF|unix.IN_MOVED_FROM) != 0 {
		op |= fsnotify.Rename
	}
	if re.mask&unix.IN_ATTRIB != 0 {
		op |= fsnotify.Chmod
	}
	if op == 0 {
		return r, false
	}
	return resolved{ev: fsnotify.Event{Name: name, Op: op}, isDir: isDir}, true
}

// forget drops the watch wd on path from the maps. Call with mu held.
func (w *inoWatcher) forget(wd int32, path string) {
	delete(w.byWd, wd)
	if w.byPath[path] == wd {
		delete(w.byPath, path)
	}
}

// forgetTree removes the watches on dir and below it. Call with mu held.
func (w *inoWatcher) forgetTree(dir string) {
	for p, wd := range w.byPath {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
			w.forget(wd, p)
		}
	}
}

// rebase moves the watches below old to below new (a directory moved
// within the tree). Call with mu held.
func (w *inoWatcher) rebase(old, new string) {
	var moved []string
	for p := range w.byPath {
		if p == old || strings.HasPrefix(p, old+"/") {
			moved = append(moved, p)
		}
	}
	for _, p := range moved {
		wd := w.byPath[p]
		np := new + p[len(old):]
		delete(w.byPath, p)
		w.byPath[np] = wd
		w.byWd[wd] = np
	}
}
