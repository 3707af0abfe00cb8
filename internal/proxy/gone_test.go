package proxy_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/proxy"
)

// mutableResolver is a resolver whose sandboxes can disappear mid-test.
type mutableResolver struct {
	mu sync.Mutex
	m  map[string]proxy.Target
}

func (r *mutableResolver) Lookup(id string) (proxy.Target, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.m[id]
	return t, ok
}

func (r *mutableResolver) Targets() []proxy.Target {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []proxy.Target
	for _, t := range r.m {
		out = append(out, t)
	}
	return out
}

func (r *mutableResolver) remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, id)
}

// A stream from a sandbox that goes away while the request is in flight ends
// promptly instead of hanging until the client gives up.
func TestStreamEndsWhenSandboxGone(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := startUpstream(t, "a", "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("first\n"))
		w.(http.Flusher).Flush()
		select { // a dead agent: never writes again, never closes
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	res := &mutableResolver{m: map[string]proxy.Target{"iabc": {ID: "iabc", Addr: netip.MustParseAddr("127.0.0.1")}}}
	srv := newProxy(t, res)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/process.Process/Start", nil)
	req.Header.Set("E2b-Sandbox-Id", "iabc")
	req.Header.Set("E2b-Sandbox-Port", up.port)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first\n" {
		t.Fatalf("first chunk: %q %v", buf, err)
	}
	res.remove("iabc")
	start := time.Now()
	_, err = io.ReadAll(resp.Body)
	if ctx.Err() != nil {
		t.Fatal("stream still open 30 s after the sandbox went away")
	}
	if err == nil {
		t.Error("stream ended cleanly; want an error so the client knows it was cut off")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stream ended %v after the sandbox went away", d)
	}
}

// countingTransport counts CloseIdleConnections calls.
type countingTransport struct {
	http.RoundTripper
	mu     sync.Mutex
	closes int
}

func (c *countingTransport) CloseIdleConnections() {
	c.mu.Lock()
	c.closes++
	c.mu.Unlock()
}

func (c *countingTransport) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closes
}

// When a guest address passes to a new sandbox, pooled connections to the
// previous owner are dropped before the new one is proxied to.
func TestAddressReuseDropsIdleConnections(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, "a", "127.0.0.1:0", nil)
	tr := &countingTransport{RoundTripper: proxy.DefaultTransport()}
	addr := netip.MustParseAddr("127.0.0.1")
	res := &mutableResolver{m: map[string]proxy.Target{"iold": {ID: "iold", Addr: addr}}}
	h := proxy.New(res, apiStub, proxy.Options{Transport: tr, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	call := func(id string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/health", nil)
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", up.port)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", id, resp.StatusCode)
		}
	}
	call("iold")
	call("iold")
	if n := tr.count(); n != 0 {
		t.Fatalf("idle connections closed %d times for one owner", n)
	}
	res.remove("iold")
	res.mu.Lock()
	res.m["inew"] = proxy.Target{ID: "inew", Addr: addr}
	res.mu.Unlock()
	call("inew")
	call("inew")
	if n := tr.count(); n != 1 {
		t.Fatalf("idle connections closed %d times after the address changed hands, want 1", n)
	}
}
