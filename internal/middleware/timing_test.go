package middleware

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTiming: one line per request on a kept-alive connection, once its
// answer was written, with the handler's time and read/write instants.
func TestTiming(t *testing.T) {
	var out syncBuffer
	logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := Timing(logger, RequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		if r.Method == http.MethodDelete {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ConnContext: TimingConnContext}
	go func() { _ = srv.Serve(TimingListener(ln)) }()
	defer srv.Close()
	cl := &http.Client{}
	for _, m := range []string{http.MethodDelete, http.MethodGet} {
		req, _ := http.NewRequest(m, "http://"+ln.Addr().String()+"/sandboxes/x", nil)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(out.String(), "request timing") < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 timing lines, got %q", out.String())
	}
	for i, m := range []string{"DELETE", "GET"} {
		l := lines[i]
		kv := map[string]string{}
		for _, f := range strings.Fields(l) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		if kv["method"] != m || kv["path"] != "/sandboxes/x" || kv["request"] == "" {
			t.Errorf("line %d: %q", i, l)
		}
		if d, err := time.ParseDuration(kv["handler"]); err != nil || d < 20*time.Millisecond {
			t.Errorf("line %d: handler %q, want ≥ 20ms", i, kv["handler"])
		}
		if kv["read_at"] == "0" || kv["write_at"] == "0" || kv["read_at"] > kv["write_at"] {
			t.Errorf("line %d: read_at %s, write_at %s", i, kv["read_at"], kv["write_at"])
		}
	}
}
