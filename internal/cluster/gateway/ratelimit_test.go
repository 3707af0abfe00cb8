package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/guest"
)

func (s *fakeStore) reads() (tokens, sandboxes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenReads, s.sandboxReads
}

// M3 (issue 23): a signature that is not shaped like one is refused before
// anything is read; a well-formed wrong one costs at most one store read a
// second, whatever the number of requests; a sandbox created after the
// last read is still found.
func TestSignedFilesReadTokensSparingly(t *testing.T) {
	c := newTestCluster(t, 2, func(o *Options) { o.VerifySignature = guest.VerifySignature })
	c.store.sandboxes["sb1"] = "n1"
	c.store.tokens = []cluster.SandboxToken{{SandboxID: "sb1", NodeID: "n1", AccessToken: "t1"}}
	good := guest.Sign("/x", guest.OpRead, "", "t1", 0)
	for _, sig := range []string{"x", "a", "v1_", "v1_short", "v2_" + good[3:], good + "A", good[:len(good)-1] + "!", "v1_" + strings.Repeat("A", 42) + "="} {
		resp := c.do("GET", "/files?path=/x&signature="+url.QueryEscape(sig), false, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "invalid signature") {
			t.Errorf("signature %q: %d %s; want 400 invalid signature", sig, resp.StatusCode, b)
		}
	}
	if tok, _ := c.store.reads(); tok != 0 {
		t.Fatalf("malformed signatures read the tokens %d times; want 0", tok)
	}

	// 30 well-formed wrong signatures at once: one read (two if the first
	// lookups straddle it), not 30.
	wrong := guest.Sign("/x", guest.OpRead, "", "not-a-token", 0)
	var wg sync.WaitGroup
	codes := make([]int, 30)
	for i := range codes {
		wg.Go(func() {
			resp := c.do("GET", "/files?path=/x&signature="+url.QueryEscape(wrong), false, nil)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, code := range codes {
		if code != http.StatusUnauthorized {
			t.Errorf("wrong signature %d: %d, want 401", i, code)
		}
	}
	if tok, _ := c.store.reads(); tok < 1 || tok > 2 {
		t.Fatalf("30 wrong signatures read the tokens %d times; want 1 or 2", tok)
	}

	// A sandbox created after the last read: its URL waits for the next.
	c.store.mu.Lock()
	c.store.sandboxes["sb2"] = "n2"
	c.store.tokens = append(c.store.tokens, cluster.SandboxToken{SandboxID: "sb2", NodeID: "n2", AccessToken: "t2"})
	c.store.mu.Unlock()
	var e echo
	decode(t, c.do("GET", "/files?path=/x&signature="+url.QueryEscape(guest.Sign("/x", guest.OpRead, "", "t2", 0)), false, nil), http.StatusOK, &e)
	if e.Node != "n2" {
		t.Errorf("signed read of a new sandbox on %s, want n2", e.Node)
	}
	// One that was read is found without a read.
	before, _ := c.store.reads()
	decode(t, c.do("GET", "/files?path=/x&signature="+url.QueryEscape(good), false, nil), http.StatusOK, &e)
	if after, _ := c.store.reads(); after != before || e.Node != "n1" {
		t.Errorf("a known token: %d reads, node %s; want none, n1", after-before, e.Node)
	}
}

// L7 and M3 (issue 23): sandbox traffic without the API key that costs the
// api tier store reads (a route it has not cached) or moves takes from a
// per-client limit; past it, 429 and nothing is read. Traffic to a cached
// route, and requests with the API key, are not limited.
func TestUnauthenticatedTrafficIsRateLimited(t *testing.T) {
	c := newTestCluster(t, 2, func(o *Options) {
		o.UnauthRate, o.UnauthBurst = 0.001, 3
		o.VerifySignature = guest.VerifySignature
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.g.runRouteWatch(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for c.g.routes.now() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	c.store.mu.Lock()
	c.store.sandboxes["live1"] = "n1"
	c.store.mu.Unlock()
	host := func(id string) string { return "49983-" + id + "." + testDomain }

	// The first request routes live1 (a store read: one token) and caches it.
	decode(t, c.do("GET", "/health", false, nil, "Host", host("live1")), http.StatusOK, nil)
	// Made-up ids: each costs store reads, two more pass, then 429.
	for i := range 2 {
		resp := c.do("GET", "/health", false, nil, "Host", host(fmt.Sprintf("madeup%d", i)))
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("made-up id %d within the limit: %d, want 502 (not found)", i, resp.StatusCode)
		}
	}
	_, readsBefore := c.store.reads()
	for i := 2; i < 12; i++ {
		resp := c.do("GET", "/health", false, nil, "Host", host(fmt.Sprintf("madeup%d", i)))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), "too many unauthenticated requests") || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("made-up id %d past the limit: %d %s; want 429", i, resp.StatusCode, b)
		}
	}
	if _, after := c.store.reads(); after != readsBefore {
		t.Fatalf("requests refused by the limit read the store %d times", after-readsBefore)
	}
	// Signed /files lookups share the limit.
	resp := c.do("GET", "/files?path=/x&signature="+url.QueryEscape(guest.Sign("/x", guest.OpRead, "", "t", 0)), false, nil)
	resp.Body.Close()
	if tok, _ := c.store.reads(); resp.StatusCode != http.StatusTooManyRequests || tok != 0 {
		t.Fatalf("a signed lookup past the limit: %d, %d token reads; want 429, 0", resp.StatusCode, tok)
	}
	// A cached route to a live node costs nothing: not limited.
	for range 5 {
		decode(t, c.do("GET", "/health", false, nil, "Host", host("live1")), http.StatusOK, nil)
	}
	// With the API key: not limited.
	resp = c.do("GET", "/health", true, nil, "Host", host("madeup99"))
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("a made-up id with the API key: %d, want 502 (not found)", resp.StatusCode)
	}
}

// With the route cache off (no watch: the store's notifications broke),
// a sandbox routed a moment ago is not limited; made-up ids still are.
func TestRoutedSandboxNotLimitedWithoutRouteCache(t *testing.T) {
	c := newTestCluster(t, 1, func(o *Options) { o.UnauthRate, o.UnauthBurst = 0.001, 2 })
	c.store.mu.Lock()
	c.store.sandboxes["live1"] = "n1"
	c.store.mu.Unlock()
	for i := range 10 {
		resp := c.do("GET", "/health", false, nil, "E2b-Sandbox-Id", "live1")
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d to a routed sandbox: %d", i, resp.StatusCode)
		}
	}
	codes := []int{}
	for i := range 3 {
		resp := c.do("GET", "/health", false, nil, "E2b-Sandbox-Id", fmt.Sprintf("nope%d", i))
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if !slices.Equal(codes, []int{http.StatusBadGateway, http.StatusTooManyRequests, http.StatusTooManyRequests}) {
		t.Fatalf("made-up ids after the burst went to live1: %v", codes)
	}
}

func TestClientLimiter(t *testing.T) {
	l := newClientLimiter(1, 2)
	now := time.Now()
	var got []bool
	for range 3 {
		got = append(got, l.allow("a", now))
	}
	if !slices.Equal(got, []bool{true, true, false}) {
		t.Fatalf("three takes at once with a burst of 2: %v", got)
	}
	if !l.allow("b", now) {
		t.Fatal("another client shares a's bucket")
	}
	if !l.allow("a", now.Add(1100*time.Millisecond)) {
		t.Fatal("a's bucket did not refill")
	}
	l.allow("c", now.Add(2*limiterIdle))
	l.mu.Lock()
	n := len(l.clients)
	l.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d buckets after every other client idled past limiterIdle, want 1", n)
	}
}
