package interpreter

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/envd/state"
)

// The default JavaScript context is listed at once but its node starts on
// the first use, with the sandbox env vars of that moment (a restored
// sandbox's /init sets them after the agent started), and answers that
// first cell.
func TestDefaultJavaScriptStartsOnFirstUse(t *testing.T) {
	needTool(t, "node", "--version")
	st := state.New("root")
	s, err := New(st, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.Close() })
	s.StartDefaults(context.Background())
	s.mu.Lock()
	js := s.defaults["javascript"]
	s.mu.Unlock()
	if js == nil {
		t.Fatal("no default JavaScript context registered")
	}
	ids := listContexts(t, ts.URL)
	found := false
	for _, id := range ids {
		found = found || id == js.ID
	}
	if !found {
		t.Fatalf("default JavaScript context %s not listed: %v", js.ID, ids)
	}
	time.Sleep(300 * time.Millisecond)
	select {
	case <-js.ready:
		t.Fatal("the JavaScript kernel started before its first use")
	default:
	}
	st.Init(nil, nil, nil, map[string]string{"AL_LAZY": "set-after-start"})
	start := time.Now()
	if got := mainText(run(t, ts.URL, rec{"code": "process.env.AL_LAZY", "context_id": js.ID})); got != "'set-after-start'" && got != "set-after-start" {
		t.Fatalf("first JavaScript cell: %q", got)
	}
	t.Logf("first JavaScript cell, node started on demand: %v", time.Since(start))
	if got := mainText(run(t, ts.URL, rec{"code": "40 + 2", "language": "js"})); got != "42" {
		t.Fatalf("second JavaScript cell: %q", got)
	}
	if got := listContexts(t, ts.URL); len(got) != len(ids) {
		t.Fatalf("contexts changed: %v, were %v", got, ids)
	}
}

// Closing the server does not start (or wait 30 s for) a lazy kernel that
// was never used.
func TestCloseUnusedLazyContext(t *testing.T) {
	needTool(t, "node", "--version")
	s, err := New(state.New("root"), slog.New(slog.NewTextHandler(io.Discard, nil)), Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.registerDefault("javascript", true)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v", d)
	}
	if err := e.wait(context.Background()); err != errContextClosed {
		t.Fatalf("wait after Close: %v, want %v", err, errContextClosed)
	}
}

// No cell runs before the kernel's warm-up has: a cell written to the fast
// channel right after the start used to be picked by the kernel's event loop
// ahead of the warm-up request queued on ZeroMQ (a boot snapshot then caught
// the imports half done).
func TestFirstCellRunsAfterWarmup(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel")
	st := state.New("root")
	s, err := New(st, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{StateDir: t.TempDir(),
		Warmup: "import time\ntime.sleep(1.5)\nwarm_done = 'yes'"})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.Close() })
	for _, silent := range []bool{true, false} {
		id := createContext(t, ts.URL, `{"language":"python"}`)
		if silent {
			// The daemon's check before a boot snapshot: a silent cell
			// that fails when the warm-up has not run.
			out := run(t, ts.URL, rec{"code": "assert warm_done == 'yes'", "context_id": id, "silent": true})
			for _, r := range out {
				if r["type"] == "error" {
					t.Fatalf("silent cell ran before the warm-up: %v", out)
				}
			}
			continue
		}
		if got := mainText(run(t, ts.URL, rec{"code": "warm_done", "context_id": id})); got != "'yes'" && got != "yes" {
			t.Fatalf("first cell: %q, want 'yes' (the warm-up ran first)", got)
		}
	}
}
