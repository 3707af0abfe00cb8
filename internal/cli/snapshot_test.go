package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestPauseResumeForkCommands(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies = map[string]map[string]any{}
		paused = map[string]bool{"ione": false}
	)
	mux := http.NewServeMux()
	record := func(r *http.Request) {
		var b map[string]any
		_ = json.NewDecoder(r.Body).Decode(&b)
		mu.Lock()
		bodies[r.URL.Path] = b
		mu.Unlock()
	}
	errJSON := func(w http.ResponseWriter, code int, msg string) {
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg})
	}
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		mu.Lock()
		defer mu.Unlock()
		p, ok := paused[r.PathValue("id")]
		switch {
		case !ok:
			errJSON(w, 404, "not found")
		case p:
			errJSON(w, 409, "sandbox is already paused")
		default:
			paused[r.PathValue("id")] = true
			w.WriteHeader(204)
		}
	})
	mux.HandleFunc("POST /sandboxes/{id}/resume", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"sandboxID":"` + r.PathValue("id") + `","templateID":"base","clientID":"x","envdVersion":"0.6.13"}`))
	})
	mux.HandleFunc("POST /sandboxes/{id}/fork", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`[{"sandbox":{"sandboxID":"ikid1"}},{"error":{"code":500,"message":"no room"}},{"sandbox":{"sandboxID":"ikid2"}}]`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	d := &fakeDaemon{t: t, srv: srv}

	if out := mustRun(t, d, "sandbox", "pause", "ione"); out != "ione\n" {
		t.Fatalf("pause stdout %q", out)
	}
	r := run(t, d, nil, "sandbox", "pause", "ione", "inope")
	if r.err == nil || !strings.Contains(r.err.Error(), "already paused") || !strings.Contains(r.err.Error(), "sandbox inope not found") {
		t.Fatalf("pause twice/unknown error = %v", r.err)
	}
	if out := mustRun(t, d, "sandbox", "resume", "--timeout", "60", "ione"); out != "ione\n" {
		t.Fatalf("resume stdout %q", out)
	}
	if got := bodies["/sandboxes/ione/resume"]["timeout"]; got != float64(60) {
		t.Fatalf("resume body timeout = %v", got)
	}
	r = run(t, d, nil, "sandbox", "fork", "-n", "3", "ione")
	if r.stdout != "ikid1\nikid2\n" || r.err == nil || !strings.Contains(r.err.Error(), "fork 2: no room") {
		t.Fatalf("fork = %q, %v", r.stdout, r.err)
	}
	if b := bodies["/sandboxes/ione/fork"]; b["count"] != float64(3) || b["timeout"] != float64(300) {
		t.Fatalf("fork body = %v", b)
	}
}
