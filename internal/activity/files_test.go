package activity

import (
	"context"
	"testing"
	"time"
)

func TestFileCoalesceAndRate(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	h := New(nil, Options{Now: func() time.Time { return now }})
	h.File("s", FileCreate, "/home/user/f")
	for i := 0; i < 50; i++ {
		h.File("s", FileWrite, "/home/user/f") // one entry per window
	}
	now = now.Add(WriteWindow)
	h.File("s", FileWrite, "/home/user/f")
	h.File("s", FileDelete, "/home/user/f")
	es := h.Query("s", 0, nil, 0)
	var types []string
	for _, e := range es {
		types = append(types, e.Type)
	}
	if len(es) != 4 || types[1] != FileWrite || types[2] != FileWrite || es[0].Data["path"] != "/home/user/f" {
		t.Fatalf("coalesced: %v", types)
	}
	// A flood: FileRate entries a second, then one file.dropped with the
	// count before the next kept entry.
	now = now.Add(time.Second)
	for i := 0; i < FileRate+30; i++ {
		h.File("s", FileCreate, "/tmp/x"+string(rune('a'+i%26)))
	}
	now = now.Add(time.Second)
	h.File("s", FileCreate, "/tmp/last")
	es = h.Query("s", 4, nil, 0)
	if len(es) != FileRate+2 {
		t.Fatalf("flood kept %d entries, want %d", len(es), FileRate+2)
	}
	if d := es[FileRate]; d.Type != FileDropped || d.Data["count"] != 30 {
		t.Fatalf("dropped entry %+v", d)
	}
	if es[FileRate+1].Data["path"] != "/tmp/last" {
		t.Fatalf("last %+v", es[FileRate+1])
	}
}

func TestOnListenRunsWhileSubscribed(t *testing.T) {
	h := New(nil, Options{})
	started := make(chan string, 4)
	stopped := make(chan string, 4)
	h.SetOnListen(func(ctx context.Context, id string) {
		started <- id
		<-ctx.Done()
		stopped <- id
	})
	_, a := h.Subscribe("s", 0, nil)
	_, b := h.Subscribe("s", 0, nil)
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("onListen did not start")
	}
	h.Unsubscribe(a)
	select {
	case <-stopped:
		t.Fatal("stopped with a subscriber left")
	case <-time.After(50 * time.Millisecond):
	}
	h.Unsubscribe(b)
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("onListen did not stop after the last subscriber")
	}
	if len(started) != 0 {
		t.Fatal("started twice")
	}
	// A subscriber that takes no file entries starts no watch.
	_, c := h.Subscribe("s", 0, []string{"egress", "process.start"})
	select {
	case <-started:
		t.Fatal("file watch started for an egress/process subscriber")
	case <-time.After(50 * time.Millisecond):
	}
	_, d := h.Subscribe("s", 0, []string{"file.write"})
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("file watch did not start for a file.write subscriber")
	}
	h.Unsubscribe(d)
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("file watch kept for a subscriber that takes no file entries")
	}
	h.Unsubscribe(c)
}

// Behind an agent that coalesced, the host keeps every write it is sent
// and adds the agent's dropped count to the file.dropped entry.
func TestFileFromCoalescingAgent(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	h := New(nil, Options{Now: func() time.Time { return now }})
	h.file("s", FileWrite, "/home/user/f", true, 0)
	h.file("s", FileWrite, "/home/user/f", true, 0)
	h.file("s", FileCreate, "/home/user/g", true, 7)
	es := h.Query("s", 0, nil, 0)
	if len(es) != 4 || es[1].Type != FileWrite || es[2].Type != FileDropped || es[2].Data["count"] != 7 {
		t.Fatalf("entries %+v", es)
	}
}
