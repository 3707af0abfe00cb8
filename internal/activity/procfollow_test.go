package activity

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAgent is a ring of process events served as the agent does.
type fakeAgent struct {
	mu    sync.Mutex
	lines []string // seq i+1 at index i
	asked []string
}

func (a *fakeAgent) add(t time.Time, typ string, pid int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	seq := len(a.lines) + 1
	a.lines = append(a.lines, fmt.Sprintf(`{"seq":%d,"time":%q,"type":%q,"data":{"pid":%d,"argv":["sleep","1"]}}`, seq, t.Format(time.RFC3339Nano), typ, pid))
}

// open serves the backlog after `after` and ends (a stream the next Sync
// reopens).
func (a *fakeAgent) open(_ context.Context, id string, after uint64, fromStart bool) (io.ReadCloser, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, fmt.Sprintf("%s after=%d fromStart=%v", id, after, fromStart))
	if !fromStart && after == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	return io.NopCloser(strings.NewReader(strings.Join(a.lines[after:], "\n") + "\n")), nil
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for range 500 {
		if ok() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestProcFollower(t *testing.T) {
	h := New(nil, Options{})
	a := &fakeAgent{}
	p := NewProcFollower(h, a.open)
	start := time.Now()
	a.add(start.Add(-time.Hour), "process.start", 1) // a boot snapshot's: not the sandbox's
	a.add(start.Add(time.Second), "process.start", 42)
	a.add(start.Add(2*time.Second), "process.exit", 42)
	ctx := context.Background()
	tg := []FollowTarget{{ID: "sb", Running: true, StartedAt: start}}
	p.Sync(ctx, tg)
	waitFor(t, "two entries", func() bool { return len(h.Query("sb", 0, nil, 0)) == 2 })
	got := h.Query("sb", 0, nil, 0)
	if got[0].Type != "process.start" || got[0].Data["pid"] != float64(42) || got[1].Type != "process.exit" {
		t.Fatalf("entries: %+v", got)
	}
	// Paused, then running again: the next stream resumes after seq 3.
	waitFor(t, "the stream to end", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.running) == 0 })
	tg[0].Running = false
	p.Sync(ctx, tg)
	a.add(start.Add(3*time.Second), "process.start", 43)
	tg[0].Running = true
	p.Sync(ctx, tg)
	waitFor(t, "the third entry", func() bool { return len(h.Query("sb", 0, nil, 0)) == 3 })
	a.mu.Lock()
	asked := strings.Join(a.asked, "; ")
	a.mu.Unlock()
	if asked != "sb after=0 fromStart=true; sb after=3 fromStart=false" {
		t.Fatalf("streams asked: %s", asked)
	}
	// A new daemon (new follower, same feed): it asks for the whole ring
	// and keeps only what is newer than the feed's newest process entry.
	p2 := NewProcFollower(h, a.open)
	a.add(start.Add(4*time.Second), "process.exit", 43)
	p2.Sync(ctx, tg)
	waitFor(t, "the fourth entry", func() bool { return len(h.Query("sb", 0, nil, 0)) == 4 })
	time.Sleep(50 * time.Millisecond)
	got = h.Query("sb", 0, nil, 0)
	if len(got) != 4 || got[3].Type != "process.exit" || got[3].Data["pid"] != float64(43) {
		t.Fatalf("after a restart: %+v", got)
	}
	// A sandbox gone: forgotten.
	p2.Sync(ctx, nil)
	if len(p2.last) != 0 || len(p2.running) != 0 {
		t.Fatalf("kept state of a gone sandbox: %v %v", p2.last, p2.running)
	}
}

// An agent without process events (an older guest kernel) is asked once.
func TestProcFollowerUnsupported(t *testing.T) {
	h := New(nil, Options{})
	var mu sync.Mutex
	asked := 0
	open := func(context.Context, string, uint64, bool) (io.ReadCloser, error) {
		mu.Lock()
		defer mu.Unlock()
		asked++
		return nil, fmt.Errorf("%w: 501", ErrNoProcessEvents)
	}
	p := NewProcFollower(h, open)
	tg := []FollowTarget{{ID: "sb", Running: true}}
	for range 5 {
		p.Sync(context.Background(), tg)
		waitFor(t, "the stream to end", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.running) == 0 })
	}
	mu.Lock()
	defer mu.Unlock()
	if asked != 1 {
		t.Fatalf("asked %d times, want 1", asked)
	}
}
