package filefeed

import (
	"fmt"
	"testing"
	"time"
)

func TestCoalesceWritesPerPath(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var l Limiter
	kept := 0
	if ok, _ := l.Add(now, Create, "/home/user/f", 0); !ok {
		t.Fatal("create left out")
	}
	for i := 0; i < 50; i++ { // N writes to one path in one window: one kept
		if ok, _ := l.Add(now.Add(time.Duration(i)*time.Millisecond), Write, "/home/user/f", 0); ok {
			kept++
		}
	}
	if kept != 1 {
		t.Fatalf("kept %d writes in one window, want 1", kept)
	}
	if ok, _ := l.Add(now, Write, "/home/user/g", 0); !ok {
		t.Fatal("a write to another path was coalesced")
	}
	if ok, _ := l.Add(now.Add(Window), Write, "/home/user/f", 0); !ok {
		t.Fatal("a write in the next window was coalesced")
	}
	// A delete ends the path's window: a new file's first write is kept.
	l.Add(now.Add(Window), Delete, "/home/user/f", 0)
	if ok, _ := l.Add(now.Add(Window), Write, "/home/user/f", 0); !ok {
		t.Fatal("the first write after a delete was coalesced")
	}
	// Without coalescing every write counts.
	nc := Limiter{NoCoalesce: true}
	for i := 0; i < 3; i++ {
		if ok, _ := nc.Add(now, Write, "/p", 0); !ok {
			t.Fatal("NoCoalesce left a write out")
		}
	}
}

func TestRateCapReportsDropped(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var l Limiter
	kept := 0
	for i := 0; i < Rate+30; i++ {
		if ok, d := l.Add(now, Create, fmt.Sprintf("/tmp/x%d", i), 0); ok {
			kept++
			if d != 0 {
				t.Fatalf("dropped %d before the cap", d)
			}
		}
	}
	if kept != Rate {
		t.Fatalf("kept %d in one second, want %d", kept, Rate)
	}
	// The next kept event carries the count; upstream drops add to it.
	ok, d := l.Add(now.Add(time.Second), Create, "/tmp/last", 5)
	if !ok || d != 35 {
		t.Fatalf("next event kept=%v dropped=%d, want true 35", ok, d)
	}
	if _, d := l.Add(now.Add(time.Second), Create, "/tmp/more", 0); d != 0 {
		t.Fatalf("count reported twice: %d", d)
	}
}

func TestFull(t *testing.T) {
	now := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	var l Limiter
	if _, full := l.Full(now); full {
		t.Fatal("a new limiter is full")
	}
	for i := 0; i < Rate; i++ {
		if _, full := l.Full(now); full {
			t.Fatalf("full after %d events, want after %d", i, Rate)
		}
		l.Add(now.Add(time.Duration(i)*time.Millisecond), Create, fmt.Sprintf("/home/user/f%d", i), 0)
	}
	at := now.Add(500 * time.Millisecond)
	if until, full := l.Full(at); !full || !until.Equal(now.Add(time.Second)) {
		t.Fatalf("after %d events: Full = %v, %v; want true until the window's end %v", Rate, until, full, now.Add(time.Second))
	}
	if keep, _ := l.Add(at, Create, "/home/user/late", 0); keep {
		t.Fatal("an event kept while Full")
	}
	if _, full := l.Full(now.Add(time.Second)); full {
		t.Fatal("still full once the window ended")
	}
	if keep, dropped := l.Add(now.Add(time.Second), Create, "/home/user/next", 0); !keep || dropped != 1 {
		t.Fatalf("first event of the next window: keep %v, dropped %d; want kept, 1 dropped", keep, dropped)
	}
}
