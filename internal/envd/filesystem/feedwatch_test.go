//go:build linux

package filesystem

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

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

// TestFeedWatchCoalesces: the activity feed's watch gets one write per path
// per window, no CHMOD, and past the rate cap a dropped count; an SDK watch
// on the same directory still gets every event.
func TestFeedWatchCoalesces(t *testing.T) {
	e := newEnv(t)
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
	// identical events queued back to back).
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

	// A flood of creates: at most filefeed.Rate a second, the rest counted
	// and reported before the next event kept.
	time.Sleep(filefeed.Window + 100*time.Millisecond)
	const files = 500
	start := time.Now()
	for i := 0; i < files; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("x%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	time.Sleep(filefeed.Window + 100*time.Millisecond)
	if err := os.WriteFile(filepath.Join(dir, "last"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	kept, creates, dropped := 0, 0, 0
	for {
		ev, ok := feedNext()
		if !ok {
			t.Fatal("feed stream ended")
		}
		if ev.GetType() == filesystempb.EventType_EVENT_TYPE_UNSPECIFIED {
			dropped += int(ev.GetEntry().GetSize())
			continue
		}
		if ev.GetName() == "last" {
			break
		}
		kept++
		if ev.GetType() == filesystempb.EventType_EVENT_TYPE_CREATE {
			creates++
		}
	}
	if dropped == 0 || creates+dropped < files {
		t.Fatalf("flood of %d creates in %v: %d kept (%d creates), %d dropped", files, elapsed, kept, creates, dropped)
	}
	if maxKept := filefeed.Rate * (int(elapsed/time.Second) + 2); kept > maxKept {
		t.Fatalf("kept %d events in %v, more than %d", kept, elapsed, maxKept)
	}
	t.Logf("flood of %d creates in %v: %d kept, %d dropped", files, elapsed, kept, dropped)
}
