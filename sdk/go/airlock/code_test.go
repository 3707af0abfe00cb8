//go:build linux

package airlock

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/envd/interpreter"
	"github.com/airlock-sandbox/airlock/internal/envd/state"
)

// fakeDaemon serves a minimal control plane and routes sandbox traffic for
// port 49999 to a real interpreter service.
func fakeDaemon(t *testing.T) *httptest.Server {
	t.Helper()
	st := state.New("root")
	tok := "tok123"
	st.Init(&tok, nil, nil, map[string]string{"GLOBAL_V": "g"})
	srv, err := interpreter.New(st, slog.New(slog.NewTextHandler(io.Discard, nil)), interpreter.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	interp := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
			if id != "sbx1" || r.Header.Get("E2b-Sandbox-Port") != "49999" {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			interp.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("X-API-Key") != "e2b_key" {
			w.WriteHeader(401)
			_, _ = io.WriteString(w, `{"code":401,"message":"Invalid API key"}`)
			return
		}
		switch {
		case r.Method == "POST" && r.URL.Path == "/v2/sandboxes":
			var body map[string]any
			_ = json.NewDecoder(r.Body).Decode(&body)
			if body["templateID"] != "code-interpreter-v1" {
				w.WriteHeader(400)
				return
			}
			w.WriteHeader(201)
			_, _ = io.WriteString(w, `{"sandboxID":"sbx1","templateID":"code-interpreter-v1","clientID":"6532622b","envdVersion":"0.6.13","envdAccessToken":"tok123"}`)
		case r.Method == "DELETE" && r.URL.Path == "/sandboxes/sbx1":
			w.WriteHeader(204)
		default:
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"code":404,"message":"not found"}`)
		}
	}))
	t.Cleanup(func() { ts.Close(); srv.Close() })
	return ts
}

func TestRunCodeThroughSDK(t *testing.T) {
	ts := fakeDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if _, err := New(ts.URL, "wrong").CreateSandbox(ctx, SandboxOptions{}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong key: err = %v, want a 401 APIError", err)
	}
	c := New(ts.URL, "e2b_key")
	sbx, err := c.CreateSandbox(ctx, SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var streamed []string
	ex, err := sbx.RunCode(ctx, "echo one; echo $GLOBAL_V; X=5", WithLanguage("bash"), OnStdout(func(s string) { streamed = append(streamed, s) }))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ex.Logs.Stdout, ""); got != "one\ng\n" || strings.Join(streamed, "") != got {
		t.Fatalf("stdout %q, streamed %q", got, streamed)
	}
	ex, err = sbx.RunCode(ctx, "echo $X; exit_code_test() { return 3; }; exit_code_test", WithLanguage("bash"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ex.Logs.Stdout, "") != "5\n" || ex.Error == nil {
		t.Fatalf("state or error lost: %+v", ex)
	}
	cc, err := sbx.CreateCodeContext(ctx, "bash", "/tmp")
	if err != nil {
		t.Fatal(err)
	}
	ex, err = sbx.RunCode(ctx, "pwd; echo ${X:-none}", InContext(cc.ID))
	if err != nil || strings.Join(ex.Logs.Stdout, "") != "/tmp\nnone\n" {
		t.Fatalf("separate context: %+v %v", ex, err)
	}
	list, err := sbx.ListCodeContexts(ctx)
	if err != nil || len(list) < 2 {
		t.Fatalf("contexts %v %v", list, err)
	}
	if err := sbx.RemoveCodeContext(ctx, cc.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := sbx.RunCode(ctx, "true", InContext(cc.ID)); err == nil {
		t.Fatal("removed context still runs")
	}
	noTok := *sbx
	noTok.AccessToken = "bad"
	if _, err := noTok.RunCode(ctx, "true", WithLanguage("bash")); err == nil {
		t.Fatal("bad access token accepted")
	}
	if err := sbx.Kill(ctx); err != nil {
		t.Fatal(err)
	}
}
