//go:build linux

package filesystem

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"

	"connectrpc.com/connect"
	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/envd/identity"
	"github.com/airlock-sandbox/airlock/internal/filefeed"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb"
)

const (
	// DefaultKeepalive is the keepalive interval when the client sends no
	// valid Keepalive-Ping-Interval header.
	DefaultKeepalive = 90 * time.Second
	// KeepaliveHeader carries the client's keepalive interval in seconds.
	KeepaliveHeader = "Keepalive-Ping-Interval"
	// MaxBufferedEvents caps a polling watcher's buffer; the oldest events
	// are dropped beyond it.
	MaxBufferedEvents = 10000
)

// networkFSTypes are mount types a watch refuses unless allow_network_mounts
// (inotify does not see remote changes there). 9p is deliberately absent:
// gVisor serves the root filesystem through a gofer.
var networkFSTypes = map[string]bool{
	"nfs": true, "nfs4": true, "cifs": true, "smb": true, "smb3": true, "smbfs": true,
	"fuse.sshfs": true, "sshfs": true,
}

// keepaliveInterval parses the Keepalive-Ping-Interval header (seconds).
func keepaliveInterval(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		return DefaultKeepalive
	}
	return time.Duration(n) * time.Second
}

// dirWatch is an fsnotify watcher on one directory (optionally recursive)
// that translates raw events into wire events; the activity feed's watch
// uses a raw inotify watcher (ino) instead.
type dirWatch struct {
	root         string
	recursive    bool
	includeEntry bool
	w            *fsnotify.Watcher // SDK watches
	ino          *inoWatcher       // the feed's watch (filefeed.Header)
	names        *names
	// as runs everything that touches the watched tree (adding watches on
	// subdirectories, stats for entries) as the acting user, so a watch
	// sees no more than the user could list: not below a directory the user
	// cannot read.
	as *identity.Runner
	// replacing is set by the rename of an upload's temp file that replaces
	// an existing file (UploadReplacePrefix): the next event, the same
	// rename's arrival under the final name, is not a CREATE. Only the
	// goroutine reading w.Events touches it.
	replacing bool
	// found, when not nil, collects the paths add finds below a directory
	// it starts watching (the feed's watch: entries created in a new
	// directory before its watch existed, which no event will report).
	found *[]string
}

// watchSpec is what WatchDir and CreateWatcher have in common.
type watchSpec interface {
	GetPath() string
	GetRecursive() bool
	GetIncludeEntry() bool
	GetAllowNetworkMounts() bool
}

// startWatch validates the request as the acting user and starts watching,
// through fsnotify, or for the activity feed (feed) through inoWatcher.
func (s *Service) startWatch(u *identity.User, spec watchSpec, feed bool) (*dirWatch, error) {
	root := s.resolve(u, spec.GetPath())
	err := identity.RunAs(u, func() error {
		fi, err := os.Stat(root)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return userErr(connect.CodeNotFound, "path '%s' does not exist", root)
			}
			return err
		}
		if !fi.IsDir() {
			return userErr(connect.CodeInvalidArgument, "path '%s' is not a directory", root)
		}
		f, err := os.Open(root) // the user must be able to read the directory
		if err != nil {
			return err
		}
		return f.Close()
	})
	if err != nil {
		return nil, s.fsError("watching "+root, err)
	}
	if !spec.GetAllowNetworkMounts() {
		real, err := filepath.EvalSymlinks(root)
		if err != nil {
			return nil, s.fsError("watching "+root, err)
		}
		fstype, err := mountType(real)
		if err != nil {
			s.log.Warn("cannot determine filesystem type", "path", real, "err", err)
		} else if networkFSTypes[fstype] {
			return nil, userErr(connect.CodeFailedPrecondition,
				"path '%s' is on a network mount (%s); set allow_network_mounts to watch it", root, fstype)
		}
	}
	as, err := identity.NewRunner(u)
	if err != nil {
		return nil, s.fsError("watching "+root, err)
	}
	d := &dirWatch{root: root, recursive: spec.GetRecursive(), includeEntry: spec.GetIncludeEntry(), names: &s.names, as: as}
	if feed {
		d.ino, err = newInoWatcher()
	} else {
		d.w, err = fsnotify.NewWatcher()
	}
	if err != nil {
		as.Close()
		return nil, s.fsError("creating watcher", err)
	}
	if err := as.Do(func() error { return d.add(root) }); err != nil {
		d.close()
		return nil, s.fsError("watching "+root, err)
	}
	return d, nil
}

// add watches dir and, when recursive, every directory below it that can
// be read. Call it through d.as. The directory is opened first, as the
// user: that open is the permission check, since gVisor's
// inotify_add_watch (unlike Linux's) does not check read permission.
func (d *dirWatch) add(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("adding watch on %s: %w", dir, err)
	}
	defer f.Close()
	if d.ino != nil {
		err = d.ino.add(dir)
	} else {
		err = d.w.Add(dir)
	}
	if err != nil {
		return fmt.Errorf("adding watch on %s: %w", dir, err)
	}
	if !d.recursive {
		return nil
	}
	des, err := f.ReadDir(-1)
	if err != nil {
		return nil // unreadable subtree: watch what we can
	}
	for _, de := range des {
		p := filepath.Join(dir, de.Name())
		if d.found != nil {
			*d.found = append(*d.found, p)
		}
		if de.IsDir() {
			_ = d.add(p)
		}
	}
	return nil
}

func (d *dirWatch) close() {
	if d.ino != nil {
		_ = d.ino.Close()
	} else {
		_ = d.w.Close()
	}
	d.as.Close()
}

// Whether an event's path is a directory: known from the event (inotify's
// IN_ISDIR), or not (fsnotify: an lstat tells).
const (
	dirUnknown = iota
	dirYes
	dirNo
)

// translate turns one fsnotify event into one wire event per op bit. dir
// says whether ev.Name is a directory, when the event told (dirYes/dirNo):
// a recursive watch adds a watch on a new directory.
func (d *dirWatch) translate(ev fsnotify.Event, dir int) []*filesystempb.FilesystemEvent {
	if base := filepath.Base(ev.Name); strings.HasPrefix(base, UploadTempPrefix) {
		// inotify reports a rename as IN_MOVED_FROM then IN_MOVED_TO, one
		// right after the other.
		d.replacing = ev.Has(fsnotify.Rename) && strings.HasPrefix(base, UploadReplacePrefix)
		return nil
	}
	if d.replacing {
		d.replacing = false
		ev.Op &^= fsnotify.Create
	}
	name, err := filepath.Rel(d.root, ev.Name)
	if err != nil {
		name = ev.Name
	}
	if d.recursive && ev.Has(fsnotify.Create) && dir != dirNo {
		_ = d.as.Do(func() error {
			if dir == dirYes {
				return d.add(ev.Name)
			}
			if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
				return d.add(ev.Name)
			}
			return nil
		})
	}
	var out []*filesystempb.FilesystemEvent
	for _, m := range []struct {
		op fsnotify.Op
		t  filesystempb.EventType
	}{
		{fsnotify.Create, filesystempb.EventType_EVENT_TYPE_CREATE},
		{fsnotify.Write, filesystempb.EventType_EVENT_TYPE_WRITE},
		{fsnotify.Remove, filesystempb.EventType_EVENT_TYPE_REMOVE},
		{fsnotify.Rename, filesystempb.EventType_EVENT_TYPE_RENAME},
		{fsnotify.Chmod, filesystempb.EventType_EVENT_TYPE_CHMOD},
	} {
		if !ev.Has(m.op) {
			continue
		}
		fe := &filesystempb.FilesystemEvent{Name: name, Type: m.t}
		if d.includeEntry && (m.op == fsnotify.Create || m.op == fsnotify.Write || m.op == fsnotify.Chmod) {
			_ = d.as.Do(func() error {
				if fi, err := os.Lstat(ev.Name); err == nil {
					fe.Entry = d.names.entryInfo(ev.Name, fi)
				}
				return nil
			})
		}
		out = append(out, fe)
	}
	return out
}

// feedKinds are the event types the activity feed reports (not CHMOD).
var feedKinds = map[filesystempb.EventType]filefeed.Kind{
	filesystempb.EventType_EVENT_TYPE_CREATE: filefeed.Create,
	filesystempb.EventType_EVENT_TYPE_WRITE:  filefeed.Write,
	filesystempb.EventType_EVENT_TYPE_RENAME: filefeed.Rename,
	filesystempb.EventType_EVENT_TYPE_REMOVE: filefeed.Delete,
}

// WatchDir streams filesystem events: start{} first, then events and
// keepalives, until the client goes away. With the filefeed.Header request
// header (the activity feed's watch, never the SDKs') the watch is a raw
// inotify one (inoWatcher: no lstat per create), the events pass
// filefeed's limits first and CHMOD is left out.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[filesystempb.WatchDirRequest], stream *connect.ServerStream[filesystempb.WatchDirResponse]) error {
	u, err := s.userFor(req.Header())
	if err != nil {
		return err
	}
	isFeed := req.Header().Get(filefeed.Header) != ""
	d, err := s.startWatch(u, req.Msg, isFeed)
	if err != nil {
		return err
	}
	defer d.close()

	// The activity feed's watch asks for its limits to be applied here, so
	// that only what the feed keeps leaves the sandbox.
	var feed *filefeed.Limiter
	now := s.now
	if now == nil {
		now = time.Now
	}
	if isFeed {
		feed = &filefeed.Limiter{}
		stream.ResponseHeader().Set(filefeed.Header, "1")
	}
	send := func(fe *filesystempb.FilesystemEvent) error {
		return stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Filesystem{Filesystem: fe}})
	}
	// lost counts events the kernel's queue overflowed on (at least one
	// each time), reported with the feed's next dropped count.
	lost := 0
	// lastAdd is when the limits last saw an event.
	var lastAdd time.Time
	emit := func(fes []*filesystempb.FilesystemEvent) error {
		for _, fe := range fes {
			if feed != nil {
				k, ok := feedKinds[fe.GetType()]
				if !ok {
					continue
				}
				lastAdd = now()
				keep, dropped := feed.Add(lastAdd, k, fe.GetName(), lost)
				lost = 0
				if !keep {
					continue
				}
				if dropped > 0 {
					if err := send(&filesystempb.FilesystemEvent{Entry: &filesystempb.EntryInfo{Size: int64(dropped)}}); err != nil {
						return fmt.Errorf("sending event: %w", err)
					}
				}
			}
			if err := send(fe); err != nil {
				return fmt.Errorf("sending event: %w", err)
			}
		}
		return nil
	}
	if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Start{Start: &filesystempb.WatchDirResponse_StartEvent{}}}); err != nil {
		return fmt.Errorf("sending start event: %w", err)
	}
	var (
		fsEvents  <-chan fsnotify.Event
		fsErrors  <-chan error
		inoEvents <-chan []rawEvent
		inoErrors <-chan error
	)
	if d.ino != nil {
		inoEvents, inoErrors = d.ino.events, d.ino.errors
	} else {
		fsEvents, fsErrors = d.w.Events, d.w.Errors
	}
	interval := keepaliveInterval(req.Header().Get(KeepaliveHeader))
	keepalive := time.NewTimer(interval)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-keepalive.C:
			if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Keepalive{Keepalive: &filesystempb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return fmt.Errorf("sending keepalive: %w", err)
			}
			keepalive.Reset(interval)
		case werr, ok := <-fsErrors:
			if !ok {
				return nil
			}
			s.log.Warn("watch error", "path", d.root, "err", werr)
		case werr, ok := <-inoErrors:
			if !ok {
				return nil
			}
			s.log.Warn("watch error", "path", d.root, "err", werr)
		case ev, ok := <-fsEvents:
			if !ok {
				return nil
			}
			if err := emit(d.translate(ev, dirUnknown)); err != nil {
				return err
			}
			keepalive.Reset(interval)
		case batch, ok := <-inoEvents:
			if !ok {
				return nil
			}
			hold := flushHoldFrom(ctx)
			hold.hold()
			for _, re := range batch {
				r, ok := d.ino.resolve(re)
				if !ok {
					continue
				}
				if r.overflow {
					// Events were lost, directories created meanwhile
					// among them: count one, and watch the tree again.
					lost++
					s.log.Warn("watch queue overflowed", "path", d.root)
					_ = d.as.Do(func() error { return d.add(d.root) })
					continue
				}
				dir := dirNo
				if r.isDir {
					dir = dirYes
				}
				// A directory created (not moved in) may already hold
				// entries by the time its watch is added: at most a
				// batch later, or a rate-cap hold later (holdFor).
				// Nothing else reports them, so they are reported as
				// created, after it. (One created between the watch and
				// the listing is also seen by the watch: reported twice.)
				var found []string
				if r.isDir && re.mask&unix.IN_CREATE != 0 {
					d.found = &found
				}
				fes := d.translate(r.ev, dir)
				d.found = nil
				for _, p := range found {
					fes = append(fes, d.translate(fsnotify.Event{Name: p, Op: fsnotify.Create}, dirNo)...)
				}
				if err := emit(fes); err != nil {
					return err
				}
			}
			hold.release()
			// Past the rate cap every event is dropped until its window
			// ends: leave them queued in the kernel until then (one read
			// and one wake-up instead of one per batch).
			if feed != nil {
				if until, full := feed.Full(lastAdd); full {
					d.ino.holdFor(until.Sub(lastAdd))
				}
			}
			keepalive.Reset(interval)
		}
	}
}

// pollWatcher buffers events for GetWatcherEvents.
type pollWatcher struct {
	d      *dirWatch
	cancel context.CancelFunc
	done   chan struct{}

	// mu guards events and dropped.
	mu      sync.Mutex
	events  []*filesystempb.FilesystemEvent
	dropped int
}

func (p *pollWatcher) run(ctx context.Context, s *Service) {
	defer close(p.done)
	for {
		select {
		case <-ctx.Done():
			return
		case werr, ok := <-p.d.w.Errors:
			if !ok {
				return
			}
			s.log.Warn("watch error", "path", p.d.root, "err", werr)
		case ev, ok := <-p.d.w.Events:
			if !ok {
				return
			}
			fes := p.d.translate(ev, dirUnknown)
			p.mu.Lock()
			p.events = append(p.events, fes...)
			if over := len(p.events) - MaxBufferedEvents; over > 0 {
				p.events = append(p.events[:0:0], p.events[over:]...)
				if p.dropped == 0 {
					s.log.Warn("watcher buffer full, dropping oldest events", "path", p.d.root)
				}
				p.dropped += over
			}
			p.mu.Unlock()
		}
	}
}

func (p *pollWatcher) drain() []*filesystempb.FilesystemEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.events
	p.events = nil
	p.dropped = 0
	return out
}

func (p *pollWatcher) stop() {
	p.cancel()
	p.d.close()
	<-p.done
}

// CreateWatcher starts a buffered watcher and returns its id.
func (s *Service) CreateWatcher(ctx context.Context, req *connect.Request[filesystempb.CreateWatcherRequest]) (*connect.Response[filesystempb.CreateWatcherResponse], error) {
	u, err := s.userFor(req.Header())
	if err != nil {
		return nil, err
	}
	d, err := s.startWatch(u, req.Msg, false)
	if err != nil {
		return nil, err
	}
	var raw [16]byte
	if _, err := io.ReadFull(rand.Reader, raw[:]); err != nil {
		d.close()
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("generating watcher id: %w", err))
	}
	id := hex.EncodeToString(raw[:])
	wctx, cancel := context.WithCancel(context.Background())
	p := &pollWatcher{d: d, cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		d.close()
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("filesystem service is shutting down"))
	}
	s.watchers[id] = p
	s.mu.Unlock()
	go p.run(wctx, s)
	return connect.NewResponse(&filesystempb.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents drains the events buffered since the previous call.
func (s *Service) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystempb.GetWatcherEventsRequest]) (*connect.Response[filesystempb.GetWatcherEventsResponse], error) {
	s.mu.Lock()
	p, ok := s.watchers[req.Msg.GetWatcherId()]
	s.mu.Unlock()
	if !ok {
		return nil, userErr(connect.CodeNotFound, "watcher '%s' not found", req.Msg.GetWatcherId())
	}
	return connect.NewResponse(&filesystempb.GetWatcherEventsResponse{Events: p.drain()}), nil
}

// RemoveWatcher stops and forgets a watcher.
func (s *Service) RemoveWatcher(ctx context.Context, req *connect.Request[filesystempb.RemoveWatcherRequest]) (*connect.Response[filesystempb.RemoveWatcherResponse], error) {
	s.mu.Lock()
	p, ok := s.watchers[req.Msg.GetWatcherId()]
	delete(s.watchers, req.Msg.GetWatcherId())
	s.mu.Unlock()
	if !ok {
		return nil, userErr(connect.CodeNotFound, "watcher '%s' not found", req.Msg.GetWatcherId())
	}
	p.stop()
	return connect.NewResponse(&filesystempb.RemoveWatcherResponse{}), nil
}

// mountType returns the filesystem type of the mount containing path.
func mountType(path string) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("opening mountinfo: %w", err)
	}
	defer f.Close()
	return mountTypeFrom(f, path)
}

// mountTypeFrom finds the longest mount point in a mountinfo listing that
// contains path and returns its filesystem type.
func mountTypeFrom(r io.Reader, path string) (string, error) {
	best, bestType := -1, ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields := strings.Fields(pre)
		postFields := strings.Fields(post)
		if len(fields) < 5 || len(postFields) < 1 {
			continue
		}
		mp := mountinfo.Unescape(fields[4])
		if !pathWithin(path, mp) {
			continue
		}
		if len(mp) >= best {
			best, bestType = len(mp), postFields[0]
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading mountinfo: %w", err)
	}
	if best < 0 {
		return "", fmt.Errorf("no mount contains %s", path)
	}
	return bestType, nil
}

func pathWithin(path, dir string) bool {
	if dir == "/" || path == dir {
		return true
	}
	return strings.HasPrefix(path, dir+"/")
}
