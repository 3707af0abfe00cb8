package activity

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/jsonlog"
)

func openHub(t *testing.T, dir string, max int) (*Hub, *jsonlog.Store) {
	t.Helper()
	logs, err := jsonlog.Open(dir, jsonlog.Options{MaxLines: max}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	return New(logs, Options{MaxEntries: max}), logs
}

func ids(es []Entry) []uint64 {
	var out []uint64
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func TestQuerySinceTypesLimitAndRestart(t *testing.T) {
	dir := t.TempDir()
	h, logs := openHub(t, dir, 100)
	for i := 0; i < 5; i++ {
		typ := "process.start"
		if i%2 == 1 {
			typ = "file.write"
		}
		h.Publish("sb1", typ, map[string]any{"i": i})
	}
	if got := ids(h.Query("sb1", 2, nil, 0)); len(got) != 3 || got[0] != 3 || got[2] != 5 {
		t.Fatalf("since 2: %v", got)
	}
	if got := ids(h.Query("sb1", 0, []string{"file"}, 0)); len(got) != 2 || got[0] != 2 || got[1] != 4 {
		t.Fatalf("types file: %v", got)
	}
	if got := ids(h.Query("sb1", 0, nil, 2)); len(got) != 2 || got[1] != 2 {
		t.Fatalf("limit 2: %v", got)
	}
	if got := h.Query("other", 0, nil, 0); len(got) != 0 {
		t.Fatalf("other sandbox: %v", got)
	}
	if err := logs.Close(); err != nil {
		t.Fatal(err)
	}
	// A new hub on the same files (a daemon restart) has the entries, and
	// ids continue.
	h2, logs2 := openHub(t, dir, 100)
	defer logs2.Close()
	if got := ids(h2.Query("sb1", 3, nil, 0)); len(got) != 2 || got[0] != 4 {
		t.Fatalf("after restart since 3: %v", got)
	}
	h2.Publish("sb1", "process.exit", nil)
	if got := ids(h2.Query("sb1", 5, nil, 0)); len(got) != 1 || got[0] != 6 {
		t.Fatalf("id after restart: %v", got)
	}
	// GC keeps live sandboxes' files, Drop removes one.
	h2.Publish("gone", "process.exit", nil)
	h2.Query("gone", 0, nil, 0) // flushes nothing by itself; Names lists it after the write
	time.Sleep(50 * time.Millisecond)
	h2.GC(func(id string) bool { return id == "sb1" })
	names, _ := logs2.Names()
	if len(names) != 1 || names[0] != "sb1"+LogSuffix {
		t.Fatalf("after GC: %v", names)
	}
	h2.Drop("sb1")
	if names, _ := logs2.Names(); len(names) != 0 {
		t.Fatalf("after Drop: %v", names)
	}
}

func TestRetention(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	h := New(nil, Options{MaxEntries: 3, MaxAge: time.Hour, Now: func() time.Time { return now }})
	h.PublishAt("s", now.Add(-2*time.Hour), "file.write", nil)
	for i := 0; i < 6; i++ {
		h.Publish("s", "file.write", nil)
	}
	if got := ids(h.Query("s", 0, nil, 0)); len(got) != 3 || got[0] != 5 {
		t.Fatalf("max entries: %v", got)
	}
	h2 := New(nil, Options{MaxEntries: 10, MaxAge: time.Hour, Now: func() time.Time { return now }})
	h2.PublishAt("s", now.Add(-2*time.Hour), "file.write", nil)
	h2.Publish("s", "file.write", nil)
	if got := ids(h2.Query("s", 0, nil, 0)); len(got) != 1 || got[0] != 2 {
		t.Fatalf("max age: %v", got)
	}
}

func TestSubscribeNoGapAndLagged(t *testing.T) {
	h := New(nil, Options{})
	h.Publish("s", "a.x", nil)
	backlog, sub := h.Subscribe("s", 0, nil)
	if len(backlog) != 1 {
		t.Fatalf("backlog %v", backlog)
	}
	h.Publish("s", "a.y", nil)
	if e := <-sub.C; e.ID != 2 {
		t.Fatalf("live entry %+v", e)
	}
	// Nobody reads: publishing does not block, the subscriber is dropped
	// and marked lagged.
	done := make(chan struct{})
	go func() {
		for i := 0; i < SubBuffer+10; i++ {
			h.Publish("s", "a.z", nil)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("publishing blocked on a slow subscriber")
	}
	n := 0
	for range sub.C {
		n++
	}
	if n != SubBuffer || !sub.Lagged() {
		t.Fatalf("read %d, lagged %v", n, sub.Lagged())
	}
	if h.Subscribers("s") != 0 {
		t.Fatal("lagged subscriber still registered")
	}
	h.Unsubscribe(sub) // no double close
}

func TestEgressDomain(t *testing.T) {
	h := New(nil, Options{})
	ip := netip.MustParseAddr("10.78.244.26")
	h.Egress("s", audit.Entry{Kind: audit.KindDNS, Decision: audit.Allowed, Rule: "allowOut a.test", Name: "a.test", QType: "A", Answers: []netip.Addr{ip}})
	h.Egress("s", audit.Entry{Kind: audit.KindConn, Decision: audit.Allowed, Rule: "allowOut a.test (resolved)", Protocol: "tcp", Dst: ip, Port: 80})
	h.Egress("s", audit.Entry{Kind: audit.KindConn, Decision: audit.Denied, Rule: "no internet", Protocol: "tcp", Dst: netip.MustParseAddr("10.78.244.27"), Port: 80})
	es := h.Query("s", 0, nil, 0)
	if len(es) != 3 || es[0].Type != "egress.dns" || es[1].Type != "egress.connect" {
		t.Fatalf("entries %+v", es)
	}
	if es[1].Data["domain"] != "a.test" || es[1].Data["verdict"] != "allowed" || es[1].Data["port"] != uint16(80) {
		t.Fatalf("allowed connect %+v", es[1].Data)
	}
	if _, ok := es[2].Data["domain"]; ok || es[2].Data["verdict"] != "denied" || es[2].Data["rule"] != "no internet" {
		t.Fatalf("denied connect %+v", es[2].Data)
	}
	var nilHub *Hub
	nilHub.Publish("s", "x", nil) // the feed off does nothing
}
