package sandbox

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestEventHandler(t *testing.T) {
	var buf bytes.Buffer
	l := newEventLog(nil)
	log := slog.New(l.handler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	log.With("component", "sandbox", "sandbox", "s1").Info("sandbox paused", "elapsed", "5ms")
	log.Warn("sandbox stopped on its own", "sandbox", "s1", "reason", "out of memory")
	log.Debug("noise", "sandbox", "s1")
	log.Info("daemon thing") // no sandbox: not kept
	es, _, ok := l.get("s1")
	if !ok || len(es) != 2 {
		t.Fatalf("events %+v", es)
	}
	if es[0].Message != "sandbox paused" || es[0].Level != "info" || es[0].Fields["elapsed"] != "5ms" || es[0].Fields["component"] != "" {
		t.Errorf("first %+v", es[0])
	}
	if es[1].Level != "warn" || es[1].Line() != "sandbox stopped on its own reason=out of memory" {
		t.Errorf("second %+v / %q", es[1], es[1].Line())
	}
	// The daemon log keeps its own level: only the warning got there.
	if out := buf.String(); strings.Contains(out, "paused") || !strings.Contains(out, "out of memory") {
		t.Errorf("daemon log %q", out)
	}
}

func TestEventLogBounds(t *testing.T) {
	l := newEventLog(nil)
	for i := 0; i < maxEvents+5; i++ {
		l.add("a", LogEntry{Message: fmt.Sprint(i)})
	}
	es, dropped, _ := l.get("a")
	if len(es) != maxEvents || es[0].Message != "5" || dropped != 5 {
		t.Fatalf("%d events, first %q, dropped %d (want 5)", len(es), es[0].Message, dropped)
	}
	l.retire("a")
	if _, _, ok := l.get("a"); !ok {
		t.Fatal("a removed sandbox lost its events at once")
	}
	for i := 0; i < maxRetired; i++ {
		id := fmt.Sprint("r", i)
		l.add(id, LogEntry{})
		l.retire(id)
	}
	if _, _, ok := l.get("a"); ok {
		t.Error("the oldest retired sandbox kept its events")
	}
	if _, _, ok := l.get(fmt.Sprint("r", maxRetired-1)); !ok {
		t.Error("the newest retired sandbox lost its events")
	}
}
