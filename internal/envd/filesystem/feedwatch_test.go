//go:build linux

package filesystem

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/filefeed"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
)

// openWatch starts a recursive WatchDir on dir, the activity feed's kind
// (filefeed.Header) when feed, and returns a reader of its filesystem
// events and whether the agent said it coalesces.
func openWatch(ctx context.Context, t *testing.T, c filesystempbconnect.FilesystemClient, dir string, feed bool) (func() (*filesystempb.FilesystemEvent, bool), bool) {
	t.Helper()
	req := connect.NewRequest(&filesystempb.WatchDirRequest{Path: dir, Recursive: true})
	if feed {
		req.Header().Set(filefeed.Header, "1")
	}
	stream, err := c.WatchDir(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stream.Close() })
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("no start: %v", stream.Err())
	}
	return func() (*filesystempb.FilesystemEvent, bool) {
		for stream.Receive() {
			if fe := stream.Msg().GetFilesystem(); fe != nil {
				return fe, true
			}
		}
		return nil, false
	}, stream.ResponseHeader().Get(filefeed.Header) != ""
}

// stepClock is the feed watch's clock in tests: every reading is step
// later than the one before (one reading per event the limits see), and
// jump moves it on; so the limits see the same times however fast the
// host runs (under -race, a flood of creates can take seconds).
type stepClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

func (c *stepClock) jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestFeedWatchCoalesces: the feed's watch (filefeed.Header) coalesces
// writes per path and caps the rate, on the agent's clock, which here
// moves 2 ms per event seen, whatever the host's speed: an SDK watch on
// the same directory gets every event.
func TestFeedWatchCoalesces(t *testing.T) {
	e := newEnv(t)
	clock := &stepClock{t: time.Unix(1_700_000_000, 0), step: 2 * time.Millisecond}
	e.svc.now = clock.now
	dir := openDir(t, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	feedNext, coalesced := openWatch(ctx, t, e.client, dir, true)
	if !coalesced {
		t.Fatal("the agent did not acknowledge the feed header")
	}
	sdkNext, sdkCoalesced := openWatch(ctx, t, e.client, dir, false)
	if sdkCoalesced {
		t.Fatal("an SDK watch was told it is coalesced")
	}

	// Writes to a.txt alternate with writes to b.txt (inotify merges
	// identical events queued back to back): 42 events, well within one
	// filefeed.Window on the clock.
	f := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(f, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		for _, p := range []string{f, filepath.Join(dir, "b.txt")} {
			af, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := af.WriteString("more\n"); err != nil {
				t.Fatal(err)
			}
			af.Close()
		}
	}
	if err := os.Chmod(f, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	count := func(next func() (*filesystempb.FilesystemEvent, bool), until string) map[filesystempb.EventType]int {
		n := map[filesystempb.EventType]int{}
		for {
			ev, ok := next()
			if !ok {
				t.Fatalf("stream ended before %s", until)
			}
			if ev.GetName() == until && ev.GetType() == filesystempb.EventType_EVENT_TYPE_CREATE {
				return n
			}
			if ev.GetName() == "a.txt" {
				n[ev.GetType()]++
			}
		}
	}
	if n := count(sdkNext, "m1"); n[filesystempb.EventType_EVENT_TYPE_WRITE] < 20 || n[filesystempb.EventType_EVENT_TYPE_CHMOD] != 1 {
		t.Fatalf("SDK watch saw %v, want every write (20 or more) and a chmod", n)
	}
	if n := count(feedNext, "m1"); n[filesystempb.EventType_EVENT_TYPE_WRITE] != 1 || n[filesystempb.EventType_EVENT_TYPE_CREATE] != 1 || len(n) != 2 {
		t.Fatalf("feed watch saw %v, want one create and one write", n)
	}

	// A flood of creates (the agent has seen every event so far: m1 was
	// the last): 500 events 2 ms apart on the clock, so 1 s holds all of
	// them; filefeed.Rate are kept, the rest counted and reported before
	// the next event kept ("last", the first of the next second).
	clock.jump(10 * filefeed.Window)
	const files = 500
	for i := 0; i < files; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("x%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "last"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	kept, dropped, droppedBeforeLast := 0, 0, 0
	for {
		ev, ok := feedNext()
		if !ok {
			t.Fatal("feed stream ended")
		}
		if ev.GetType() == filesystempb.EventType_EVENT_TYPE_UNSPECIFIED {
			dropped += int(ev.GetEntry().GetSize())
			droppedBeforeLast = int(ev.GetEntry().GetSize())
			continue
		}
		if ev.GetName() == "last" {
			break
		}
		droppedBeforeLast = 0
		if ev.GetType() != filesystempb.EventType_EVENT_TYPE_CREATE {
			t.Fatalf("flood: got %v of %s, want only creates", ev.GetType(), ev.GetName())
		}
		kept++
	}
	if kept != filefeed.Rate || dropped != files-filefeed.Rate || droppedBeforeLast != dropped {
		t.Fatalf("flood of %d creates within a second: %d kept, %d dropped (%d reported right before the next kept event); want %d kept, %d dropped, reported before it",
			files, kept, dropped, droppedBeforeLast, filefeed.Rate, files-filefeed.Rate)
	}
}

// TestFeedWatchSameAsSDK: the feed's raw inotify watch gives the entries
// an SDK (fsnotify) watch gives once passed through filefeed's limits: a
// new directory is watched (a file written inside it is seen), a rename
// is the old path's RENAME then the new path's CREATE, deletes of a file
// and of a directory. A directory renamed within the tree keeps its watch
// under the new name on the feed's watch; there, fsnotify differs (a
// second RENAME from IN_MOVE_SELF and, depending on timing, the watch on
// the moved directory dropped), so the SDK's stream is compared up to
// "common" only.
func TestFeedWatchSameAsSDK(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	feedNext, _ := openWatch(ctx, t, e.client, dir, true)
	sdkNext, _ := openWatch(ctx, t, e.client, dir, false)
	type ev struct {
		t    filesystempb.EventType
		name string
	}
	var feedGot, sdkGot []ev
	var lim filefeed.Limiter
	// collect reads both streams (the SDK's unless feedOnly) up to the
	// CREATE of until.
	feedOnly := false
	collect := func(until string) {
		t.Helper()
		for {
			fe, ok := feedNext()
			if !ok {
				t.Fatalf("feed stream ended before %s", until)
			}
			feedGot = append(feedGot, ev{fe.GetType(), fe.GetName()})
			if fe.GetName() == until && fe.GetType() == filesystempb.EventType_EVENT_TYPE_CREATE {
				break
			}
		}
		for !feedOnly {
			fe, ok := sdkNext()
			if !ok {
				t.Fatalf("SDK stream ended before %s", until)
			}
			if k, ok := feedKinds[fe.GetType()]; ok {
				if keep, _ := lim.Add(time.Now(), k, fe.GetName(), 0); keep {
					sdkGot = append(sdkGot, ev{fe.GetType(), fe.GetName()})
				}
			}
			if fe.GetName() == until && fe.GetType() == filesystempb.EventType_EVENT_TYPE_CREATE {
				break
			}
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	collect("sub") // both watches now watch sub
	must(os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("x"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "top.txt"), []byte("x"), 0o644))
	must(os.Rename(filepath.Join(dir, "top.txt"), filepath.Join(dir, "moved.txt")))
	must(os.Remove(filepath.Join(dir, "moved.txt")))
	must(os.RemoveAll(filepath.Join(dir, "sub")))
	must(os.WriteFile(filepath.Join(dir, "common"), nil, 0o644))
	collect("common")
	feedOnly = true
	must(os.Mkdir(filepath.Join(dir, "d1"), 0o755))
	collect("d1")
	must(os.Rename(filepath.Join(dir, "d1"), filepath.Join(dir, "d2")))
	collect("d2")
	must(os.WriteFile(filepath.Join(dir, "d2", "in"), nil, 0o644))
	must(os.WriteFile(filepath.Join(dir, "end"), nil, 0o644))
	collect("end")

	want := []ev{
		{filesystempb.EventType_EVENT_TYPE_CREATE, "sub"},
		{filesystempb.EventType_EVENT_TYPE_CREATE, "sub/f"},
		{filesystempb.EventType_EVENT_TYPE_WRITE, "sub/f"},
		{filesystempb.EventType_EVENT_TYPE_CREATE, "top.txt"},
		{filesystempb.EventType_EVENT_TYPE_WRITE, "top.txt"},
		{filesystempb.EventType_EVENT_TYPE_RENAME, "top.txt"},
		{filesystempb.EventType_EVENT_TYPE_CREATE, "moved.txt"},
		{filesystempb.EventType_EVENT_TYPE_REMOVE, "moved.txt"},
		{filesystempb.EventType_EVENT_TYPE_REMOVE, "sub/f"},
		{filesystempb.EventType_EVENT_TYPE_REMOVE, "sub"},
		{filesystempb.EventType_EVENT_TYPE_CREATE, "common"},
	}
	if fmt.Sprint(sdkGot) != fmt.Sprint(want) {
		t.Errorf("SDK watch through filefeed's limits:\n got %v\nwant %v", sdkGot, want)
	}
	want = append(want, []ev{
		{filesystempb.EventType_EVENT_TYPE_CREATE, "d1"},
		{filesystempb.EventType_EVENT_TYPE_RENAME, "d1"},
		{filesystempb.EventType_EVENT_TYPE_CREATE, "d2"},
		{filesystempb.EventType_EVENT_TYPE_CREATE, "d2/in"},
		{filesystempb.EventType_EVENT_TYPE_CREATE, "end"},
	}...)
	if fmt.Sprint(feedGot) != fmt.Sprint(want) {
		t.Errorf("feed watch:\n got %v\nwant %v", feedGot, want)
	}
}

// TestFeedWatchDirLeavesTree: a directory moved out of the watched tree
// takes its watch with it (nothing written there is reported).
func TestFeedWatchDirLeavesTree(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	outside := openDir(t, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	next, _ := openWatch(ctx, t, e.client, dir, true)
	waitFor := func(typ filesystempb.EventType, name string) []string {
		t.Helper()
		var seen []string
		for {
			fe, ok := next()
			if !ok {
				t.Fatalf("stream ended before %v %s; saw %v", typ, name, seen)
			}
			seen = append(seen, fe.GetType().String()+" "+fe.GetName())
			if fe.GetType() == typ && fe.GetName() == name {
				return seen
			}
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	waitFor(filesystempb.EventType_EVENT_TYPE_CREATE, "d")
	if err := os.Rename(filepath.Join(dir, "d"), filepath.Join(outside, "d")); err != nil {
		t.Fatal(err)
	}
	waitFor(filesystempb.EventType_EVENT_TYPE_RENAME, "d")
	time.Sleep(200 * time.Millisecond) // the IN_MOVE_SELF after it
	if err := os.WriteFile(filepath.Join(outside, "d", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "end"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	seen := waitFor(filesystempb.EventType_EVENT_TYPE_CREATE, "end")
	if len(seen) != 1 {
		t.Fatalf("events between the move and end: %v", seen)
	}
}

// TestInoOverflow: the kernel's queue overflow is reported as such.
func TestInoOverflow(t *testing.T) {
	w := &inoWatcher{byWd: map[int32]string{}, byPath: map[string]int32{}, movedFrom: map[uint32]string{}}
	r, ok := w.resolve(rawEvent{wd: -1, mask: unix.IN_Q_OVERFLOW})
	if !ok || !r.overflow {
		t.Fatalf("resolve(IN_Q_OVERFLOW) = %+v, %v", r, ok)
	}
	w.byWd[1], w.byPath["/r"] = "/r", 1
	r, ok = w.resolve(rawEvent{wd: 1, mask: unix.IN_CREATE | unix.IN_ISDIR, name: "n"})
	if !ok || !r.isDir || r.ev.Name != "/r/n" || r.ev.Op != fsnotify.Create {
		t.Fatalf("resolve(IN_CREATE|IN_ISDIR) = %+v, %v", r, ok)
	}
}

// TestInoWatcherHold: while held (the feed's rate cap used up), the
// reader leaves events in the kernel's queue, and reads them all once the
// hold ends.
func TestInoWatcherHold(t *testing.T) {
	dir := t.TempDir()
	w, err := newInoWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.add(dir); err != nil {
		t.Fatal(err)
	}
	const hold = 400 * time.Millisecond
	w.holdFor(hold)
	start := time.Now()
	for i := 0; i < 50; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for n < 50 {
		select {
		case batch := <-w.events:
			if at := time.Since(start); at < hold {
				t.Fatalf("a batch of %d events read %v into a hold of %v", len(batch), at, hold)
			}
			n += len(batch)
		case err := <-w.errors:
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 50 events read 10 s after the hold ended", n)
		}
	}

	// A long hold ends early once the kernel holds holdMaxQueued bytes of
	// events (Linux would drop the ones past its queue's bound).
	w.holdFor(time.Hour)
	time.Sleep(2 * feedBatchPause) // the reader is in the hold
	long := strings.Repeat("n", 200)
	files := holdMaxQueued/(unix.SizeofInotifyEvent+len(long)) + 1
	for i := 0; i < files; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s%d", long, i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case batch := <-w.events:
		if len(batch) == 0 {
			t.Fatal("an empty batch")
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%d events (over %d bytes) queued: still held 10 s later", files, holdMaxQueued)
	}
}

// TestFeedWatchNewTreeReported: entries made inside a new directory before
// the feed's watch reaches it (here: a tree made at once, faster than the
// agent's reads) are reported as created, each path at least once; a
// directory moved into the tree is not listed as new entries.
func TestFeedWatchNewTreeReported(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	outside := openDir(t, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	feedNext, _ := openWatch(ctx, t, e.client, dir, true)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(outside, "m", "deep"), 0o755))
	must(os.WriteFile(filepath.Join(outside, "m", "deep", "old"), nil, 0o644))
	must(os.MkdirAll(filepath.Join(dir, "nd", "sub"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "nd", "a"), []byte("x"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "nd", "sub", "b"), []byte("x"), 0o644))
	must(os.Rename(filepath.Join(outside, "m"), filepath.Join(dir, "moved")))
	must(os.WriteFile(filepath.Join(dir, "end"), nil, 0o644))
	created := map[string]int{}
	for {
		fe, ok := feedNext()
		if !ok {
			t.Fatalf("feed stream ended; creates so far %v", created)
		}
		if fe.GetType() == filesystempb.EventType_EVENT_TYPE_CREATE {
			created[fe.GetName()]++
		}
		if fe.GetName() == "end" {
			break
		}
	}
	for _, p := range []string{"nd", "nd/sub", "nd/a", "nd/sub/b", "moved"} {
		if created[p] == 0 {
			t.Errorf("no create of %s: creates %v", p, created)
		}
	}
	for _, p := range []string{"moved/deep", "moved/deep/old"} {
		if created[p] != 0 {
			t.Errorf("%s, inside a directory moved in, reported as created: %v", p, created)
		}
	}
}
