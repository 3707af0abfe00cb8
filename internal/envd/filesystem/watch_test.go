//go:build linux

package filesystem

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/envd/identity"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb"
)

type evKey struct {
	name string
	typ  filesystempb.EventType
}

// collect reads stream messages until every wanted event was seen.
func waitEvents(t *testing.T, next func() (*filesystempb.FilesystemEvent, bool), want ...evKey) map[evKey]*filesystempb.FilesystemEvent {
	t.Helper()
	seen := map[evKey]*filesystempb.FilesystemEvent{}
	missing := func() []evKey {
		var m []evKey
		for _, w := range want {
			if _, ok := seen[w]; !ok {
				m = append(m, w)
			}
		}
		return m
	}
	for len(missing()) > 0 {
		ev, ok := next()
		if !ok {
			t.Fatalf("stream ended; still missing %v (seen %v)", missing(), seen)
		}
		seen[evKey{ev.GetName(), ev.GetType()}] = ev
	}
	return seen
}

func TestWatchDir(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	if err := os.Mkdir(filepath.Join(dir, "existing"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := connect.NewRequest(&filesystempb.WatchDirRequest{Path: dir, Recursive: true, IncludeEntry: true})
	req.Header().Set(KeepaliveHeader, "1")
	stream, err := e.client.WatchDir(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("no first message: %v", stream.Err())
	}
	if stream.Msg().GetStart() == nil {
		t.Fatalf("first message is not start: %v", stream.Msg())
	}

	keepalives := 0
	next := func() (*filesystempb.FilesystemEvent, bool) {
		for stream.Receive() {
			if stream.Msg().GetKeepalive() != nil {
				keepalives++
				continue
			}
			if fe := stream.Msg().GetFilesystem(); fe != nil {
				return fe, true
			}
			t.Fatalf("unexpected message %v", stream.Msg())
		}
		return nil, false
	}

	f := filepath.Join(dir, "a.txt")
	writeFile(t, f, "one")
	seen := waitEvents(t, next,
		evKey{"a.txt", filesystempb.EventType_EVENT_TYPE_CREATE},
		evKey{"a.txt", filesystempb.EventType_EVENT_TYPE_WRITE})
	if en := seen[evKey{"a.txt", filesystempb.EventType_EVENT_TYPE_CREATE}].GetEntry(); en == nil || en.GetPath() != f {
		t.Fatalf("create event without the entry: %v", en)
	}

	if err := os.Chmod(f, 0o600); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, next, evKey{"a.txt", filesystempb.EventType_EVENT_TYPE_CHMOD})

	if err := os.Rename(f, filepath.Join(dir, "b.txt")); err != nil {
		t.Fatal(err)
	}
	seen = waitEvents(t, next,
		evKey{"a.txt", filesystempb.EventType_EVENT_TYPE_RENAME},
		evKey{"b.txt", filesystempb.EventType_EVENT_TYPE_CREATE})
	if seen[evKey{"a.txt", filesystempb.EventType_EVENT_TYPE_RENAME}].Entry != nil {
		t.Fatal("rename event must not carry an entry")
	}
	if err := os.Remove(filepath.Join(dir, "b.txt")); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, next, evKey{"b.txt", filesystempb.EventType_EVENT_TYPE_REMOVE})

	// Recursive: pre-existing subdir and a subdir created while watching.
	writeFile(t, filepath.Join(dir, "existing", "x"), "x")
	waitEvents(t, next, evKey{"existing/x", filesystempb.EventType_EVENT_TYPE_CREATE})
	if err := os.Mkdir(filepath.Join(dir, "new"), 0o755); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, next, evKey{"new", filesystempb.EventType_EVENT_TYPE_CREATE})
	writeFile(t, filepath.Join(dir, "new", "y"), "y")
	waitEvents(t, next, evKey{"new/y", filesystempb.EventType_EVENT_TYPE_WRITE})

	// Keepalives arrive at the requested 1 s cadence when idle.
	deadline := time.Now().Add(5 * time.Second)
	start := keepalives
	for keepalives < start+2 && time.Now().Before(deadline) {
		if stream.Receive() && stream.Msg().GetKeepalive() != nil {
			keepalives++
		}
	}
	if keepalives < start+2 {
		t.Fatalf("got %d keepalives in 5 s with a 1 s interval", keepalives-start)
	}
}

func TestWatchDirErrors(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir := openDir(t, 0o755)
	writeFile(t, filepath.Join(dir, "f"), "x")
	for path, code := range map[string]connect.Code{
		filepath.Join(dir, "missing"): connect.CodeNotFound,
		filepath.Join(dir, "f"):       connect.CodeInvalidArgument,
	} {
		stream, err := e.client.WatchDir(ctx, connect.NewRequest(&filesystempb.WatchDirRequest{Path: path}))
		if err == nil {
			if stream.Receive() {
				t.Fatalf("%s: got message %v, want error", path, stream.Msg())
			}
			err = stream.Err()
			stream.Close()
		}
		wantCode(t, err, code)
	}
	_, err := e.client.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: filepath.Join(dir, "missing")}))
	wantCode(t, err, connect.CodeNotFound)
}

func TestPollingWatcher(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dir := openDir(t, 0o755)
	res, err := e.client.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: dir, Recursive: false}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWatcherId()
	if id == "" {
		t.Fatal("empty watcher id")
	}
	writeFile(t, filepath.Join(dir, "p.txt"), "p")
	var got []*filesystempb.FilesystemEvent
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r, err := e.client.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Msg.GetEvents()...)
		if len(got) >= 2 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(got) < 2 || got[0].GetName() != "p.txt" || got[0].GetType() != filesystempb.EventType_EVENT_TYPE_CREATE ||
		got[1].GetType() != filesystempb.EventType_EVENT_TYPE_WRITE || got[0].Entry != nil {
		t.Fatalf("events: %v", got)
	}
	// Drained: nothing new without activity.
	time.Sleep(100 * time.Millisecond)
	r, err := e.client.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id}))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Msg.GetEvents()) != 0 {
		t.Fatalf("events not drained: %v", r.Msg.GetEvents())
	}
	if _, err := e.client.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, err, connect.CodeNotFound)
	_, err = e.client.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: id}))
	wantCode(t, err, connect.CodeNotFound)
}

func TestPollingWatcherBufferCap(t *testing.T) {
	p := &pollWatcher{}
	for i := 0; i < MaxBufferedEvents+10; i++ {
		p.events = append(p.events, &filesystempb.FilesystemEvent{Name: "x"})
	}
	// The cap is enforced in run; emulate one append round through the same code path.
	e := newEnv(t)
	dir := openDir(t, 0o755)
	d, err := e.svc.startWatch(rootUser(t), &filesystempb.CreateWatcherRequest{Path: dir}, false)
	if err != nil {
		t.Fatal(err)
	}
	p.d = d
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go p.run(ctx, e.svc)
	writeFile(t, filepath.Join(dir, "z"), "z")
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		n, last := len(p.events), p.events[len(p.events)-1].GetName()
		p.mu.Unlock()
		if last == "z" {
			if n != MaxBufferedEvents {
				t.Fatalf("buffer holds %d events, want cap %d", n, MaxBufferedEvents)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("event never arrived")
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.stop()
}

func rootUser(t *testing.T) *identity.User {
	t.Helper()
	u, err := identity.Lookup("root")
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestWatchSeesOnlyWhatTheUserCanRead: a recursive watch as nobody on a
// readable directory does not reach into a subdirectory only root can read,
// neither one there at the start nor one created later, and an entry is
// stat'ed as the user (review R2-2).
func TestWatchSeesOnlyWhatTheUserCanRead(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o777)
	secret := filepath.Join(dir, "secret")
	if err := os.Mkdir(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := asUser(testUser, &filesystempb.WatchDirRequest{Path: dir, Recursive: true, IncludeEntry: true})
	stream, err := e.client.WatchDir(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	next := func() (*filesystempb.FilesystemEvent, bool) {
		for stream.Receive() {
			if fe := stream.Msg().GetFilesystem(); fe != nil {
				return fe, true
			}
		}
		return nil, false
	}
	// Created after the watch started: root makes a private directory.
	later := filepath.Join(dir, "later")
	if err := os.Mkdir(later, 0o700); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the watcher adds "later" (or not)
	writeFile(t, filepath.Join(secret, "hidden-at-start"), "x")
	writeFile(t, filepath.Join(later, "hidden-later"), "x")
	// A root-only file next to them, for the entry check, and the marker.
	writeFile(t, filepath.Join(dir, "rootfile"), "12345")
	if err := os.Chmod(filepath.Join(dir, "rootfile"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "marker"), "m")
	seen := waitEvents(t, next, evKey{"marker", filesystempb.EventType_EVENT_TYPE_CREATE})
	for k := range seen {
		if filepath.Dir(k.name) != "." {
			t.Errorf("nobody's watch reported %q inside a directory only root can read", k.name)
		}
	}
	if ev := seen[evKey{"later", filesystempb.EventType_EVENT_TYPE_CREATE}]; ev == nil || ev.GetEntry().GetOwner() != "root" {
		t.Errorf("create of later: %v", ev)
	}
}
