package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestSnapshotCommands(t *testing.T) {
	var (
		mu    sync.Mutex
		names = map[string]string{} // create bodies by sandbox
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes/{id}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		var b map[string]string
		_ = json.NewDecoder(r.Body).Decode(&b)
		mu.Lock()
		names[r.PathValue("id")] = b["name"]
		mu.Unlock()
		if r.PathValue("id") == "inope" {
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"code":404,"message":"not found"}`))
			return
		}
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"snapshotID":"sone","names":["` + b["name"] + `"]}`))
	})
	mux.HandleFunc("GET /snapshots", func(w http.ResponseWriter, r *http.Request) {
		// Two pages: the client follows X-Next-Token.
		if r.URL.Query().Get("nextToken") == "" {
			w.Header().Set("X-Next-Token", "p2")
			_, _ = w.Write([]byte(`[{"snapshotID":"sone","names":["first"],"sandboxID":"ia","templateID":"base","sizeBytes":1048576,"createdAt":"2026-01-01T00:00:00Z"}]`))
			return
		}
		_, _ = w.Write([]byte(`[{"snapshotID":"stwo","names":[],"sandboxID":"ib","templateID":"base","sizeBytes":2097152,"createdAt":"2026-01-01T00:00:00Z","problem":"file disk.img does not match the manifest"}]`))
	})
	mux.HandleFunc("DELETE /templates/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") == "sone" {
			w.WriteHeader(204)
			return
		}
		w.WriteHeader(404)
		_, _ = w.Write([]byte(`{"code":404,"message":"template not found"}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	d := &fakeDaemon{t: t, srv: srv}

	if out := mustRun(t, d, "snapshot", "create", "--name", "first", "ia"); out != "sone\n" {
		t.Fatalf("create stdout %q", out)
	}
	if names["ia"] != "first" {
		t.Fatalf("create body name = %q", names["ia"])
	}
	if r := run(t, d, nil, "snapshot", "create", "inope"); r.err == nil || !strings.Contains(r.err.Error(), "sandbox inope not found") {
		t.Fatalf("create of unknown sandbox: %v", r.err)
	}
	out := mustRun(t, d, "snapshot", "ls")
	for _, want := range []string{"sone", "first", "1.0 MiB", "stwo", "invalid: file disk.img", "2 snapshot(s), 3.0 MiB on disk"} {
		if !strings.Contains(out, want) {
			t.Fatalf("ls output lacks %q:\n%s", want, out)
		}
	}
	r := run(t, d, nil, "snapshot", "rm", "sone", "snope")
	if r.stdout != "sone\n" || r.err == nil || !strings.Contains(r.err.Error(), "snapshot snope not found") {
		t.Fatalf("rm = %q, %v", r.stdout, r.err)
	}
}
