package egressproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// poolHarness is a proxy whose listeners each stand for one sandbox.
type poolHarness struct {
	proxy *Proxy
	up    *upstream
	addrs map[string]string // sandbox -> listener address
}

func newPoolHarness(t *testing.T, upAddr string, up *upstream, sandboxes map[string]string) *poolHarness {
	t.Helper()
	ca, err := NewCA("node-test")
	if err != nil {
		t.Fatal(err)
	}
	h := &poolHarness{up: up, addrs: map[string]string{},
		proxy: &Proxy{CA: ca, RootCAs: up.pool(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Resolve: func(_ context.Context, name string) ([]byte, error) { return []byte(secretValue + "-" + name), nil }}}
	for sb, rulesJSON := range sandboxes {
		rules, err := ParseRules(json.RawMessage(rulesJSON))
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		h.addrs[sb] = ln.Addr().String()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go h.proxy.HandleConn(context.Background(), c, Target{Sandbox: sb, Addr: upAddr, Rules: rules})
			}
		}()
	}
	return h
}

// newConnGet is one GET on a new connection from sandbox sb.
func (h *poolHarness) newConnGet(t *testing.T, sb, method, url string, body io.Reader) (int, string) {
	t.Helper()
	roots := h.up.pool()
	roots.AddCert(h.proxy.CA.Cert())
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", h.addrs[sb])
		},
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: true,
	}}
	req, _ := http.NewRequest(method, url, body)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s from %s: %v", method, url, sb, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitIdle(t *testing.T, p *Proxy, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); p.idleCount() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("idle upstream connections: %d, want %d", p.idleCount(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A sandbox's new connections reuse its verified upstream connection;
// another sandbox's never do: a connection that carried one sandbox's
// secret is not handed to another.
func TestUpstreamReusedBySameSandboxOnly(t *testing.T) {
	up := newUpstream(t, "api.test") // its CA and leaf
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("X-Key " + r.Header.Get("X-Key")))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.TLS = &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return up.ca.Leaf("api.test") }}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	h := newPoolHarness(t, srv.Listener.Addr().String(), up, map[string]string{
		"sbA": `{"api.test":[{"transform":{"headers":{"X-Key":"${e2b.secrets.a}"}}}]}`,
		"sbB": `{"api.test":[{"transform":{"headers":{"X-Key":"${e2b.secrets.b}"}}}]}`,
	})
	for i := range 3 {
		code, body := h.newConnGet(t, "sbA", "GET", "https://api.test/headers", nil)
		if code != 200 || !strings.Contains(body, secretValue+"-a") {
			t.Fatalf("sbA request %d: %d %s", i, code, body)
		}
		waitIdle(t, h.proxy, 1)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("3 new connections of one sandbox opened %d upstream connections; want 1 (reused)", n)
	}
	code, body := h.newConnGet(t, "sbB", "GET", "https://api.test/headers", nil)
	if code != 200 || !strings.Contains(body, secretValue+"-b") || strings.Contains(body, secretValue+"-a") {
		t.Fatalf("sbB: %d %s", code, body)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("another sandbox's connection used %d upstream connections in all; want its own (2)", n)
	}
	waitIdle(t, h.proxy, 2)
	// Closed by the server while idle: found dead, a new one is opened.
	srv.CloseClientConnections()
	if code, _ := h.newConnGet(t, "sbA", "GET", "https://api.test/headers", nil); code != 200 {
		t.Fatalf("after the server closed the idle connection: %d", code)
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("upstream connections %d; want 3", n)
	}
}

// An idle upstream connection that the server closes just as it is
// reused: a request without a body is sent again on a new verified
// connection; one with a body is not (it may have been acted on) and gets
// 502.
func TestIdleUpstreamClosedOnReuse(t *testing.T) {
	up := newUpstream(t, "api.test") // its CA and leaf only
	leaf, err := up.ca.Leaf("api.test")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*leaf}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns, requests atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() { // answers one request, then closes on the next unanswered
				defer c.Close()
				r := bufio.NewReader(c)
				req, err := http.ReadRequest(r)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				requests.Add(1)
				msg := "auth " + req.Header.Get("X-Key")
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
				r.Peek(1)
			}()
		}
	}()
	h := newPoolHarness(t, ln.Addr().String(), up, map[string]string{
		"sbA": `{"api.test":[{"transform":{"headers":{"X-Key":"${e2b.secrets.a}"}}}]}`,
	})
	if code, body := h.newConnGet(t, "sbA", "GET", "https://api.test/x", nil); code != 200 || body != "auth "+secretValue+"-a" {
		t.Fatalf("first: %d %q", code, body)
	}
	waitIdle(t, h.proxy, 1)
	if code, body := h.newConnGet(t, "sbA", "GET", "https://api.test/x", nil); code != 200 || body != "auth "+secretValue+"-a" {
		t.Fatalf("GET on a connection the server closed: %d %q; want it sent again", code, body)
	}
	if c, r := conns.Load(), requests.Load(); c != 2 || r != 2 {
		t.Fatalf("upstream connections %d, requests answered %d; want 2 and 2", c, r)
	}
	waitIdle(t, h.proxy, 1)
	if code, _ := h.newConnGet(t, "sbA", "POST", "https://api.test/x", strings.NewReader("body")); code != http.StatusBadGateway {
		t.Fatalf("POST on a connection the server closed: %d; want 502, not sent twice", code)
	}
	if r := requests.Load(); r != 2 {
		t.Fatalf("requests answered %d; want 2", r)
	}
}

// Idle upstream connections are closed after IdleTimeout.
func TestIdleUpstreamExpires(t *testing.T) {
	up := newUpstream(t, "api.test")
	h := newPoolHarness(t, up.srv.Listener.Addr().String(), up, map[string]string{"sbA": ghRule})
	h.proxy.IdleTimeout = 100 * time.Millisecond
	h.newConnGet(t, "sbA", "GET", "https://api.test/headers", nil)
	waitIdle(t, h.proxy, 1)
	waitIdle(t, h.proxy, 0)
}

func TestLeafCacheBounded(t *testing.T) {
	ca, err := NewCA("t")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := ca.Leaf("a.test")
	if b, _ := ca.Leaf("a.test"); a != b {
		t.Fatal("the leaf for a name is made again")
	}
	for i := range MaxLeaves + 10 {
		if _, err := ca.Leaf(fmt.Sprintf("h%d.test", i)); err != nil {
			t.Fatal(err)
		}
	}
	ca.mu.Lock()
	n := len(ca.leaves)
	ca.mu.Unlock()
	if n > MaxLeaves {
		t.Fatalf("%d leaves cached; bound %d", n, MaxLeaves)
	}
}
