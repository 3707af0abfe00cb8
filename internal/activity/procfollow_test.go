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
	mu     sync.Mutex
	lines  []string // seq i+1 at index i
	asked  []string
	behind *time.Duration // a clock line first, the guest this far behind
}

func (a *fakeAgent) add(t time.Time, typ string, pid int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	seq := len(a.lines) + 1
	a.lines = append(a.lines, fmt.Sprintf(`{"seq":%d,"time":%q,"type":%q,"data":{"pid":%d,"argv":["sleep","1"]}}`, seq, t.Format(time.RFC3339Nano), typ, pid))
}

// clock makes the stream start with the guest's clock line, the guest
// being behind the host by behind.
func (a *fakeAgent) clock(behind time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.behind = &behind
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
	body := strings.Join(a.lines[after:], "\n") + "\n"
	if a.behind != nil {
		body = fmt.Sprintf(`{"type":"clock","time":%q}`, time.Now().Add(-*a.behind).Format(time.RFC3339Nano)) + "\n" + body
	}
	return io.NopCloser(strings.NewReader(body)), nil
}

// An emulated guest's clock lags the host's: its events are still the
// sandbox's (compared, and published, on the host's clock), and a boot
// snapshot's older ones are still left out.
func TestProcFollowerGuestClockBehind(t *testing.T) {
	h := New(nil, Options{})
	a := &fakeAgent{}
	a.clock(10 * time.Second)
	p := NewProcFollower(h, a.open)
	start := time.Now()
	guest := func(host time.Time) time.Time { return host.Add(-10 * time.Second) }
	a.add(guest(start.Add(-time.Hour)), "process.start", 1) // a boot snapshot's
	a.add(guest(start.Add(time.Second)), "process.start", 42)
	a.add(guest(start.Add(2*time.Second)), "process.exit", 42)
	p.Sync(context.Background(), []FollowTarget{{ID: "sb", Running: true, StartedAt: start}})
	waitFor(t, "two entries", func() bool { return len(h.Query("sb", 0, nil, 0)) == 2 })
	time.Sleep(50 * time.Millisecond)
	got := h.Query("sb", 0, nil, 0)
	if len(got) != 2 || got[0].Data["pid"] != float64(42) || got[1].Type != "process.exit" {
		t.Fatalf("entries: %+v", got)
	}
	if d := got[0].Time.Sub(start.Add(time.Second)); d < -time.Second || d > time.Second {
		t.Fatalf("the start's time %v is not on the host's clock (want about %v)", got[0].Time, start.Add(time.Second))
	}
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
