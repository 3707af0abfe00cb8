package egressproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const secretValue = "tok-VERY-secret-0123456789"

// upstream is a test HTTPS server for api.test and other.test (its own CA)
// that echoes the headers and query it got, and counts requests.
type upstream struct {
	srv  *httptest.Server
	ca   *CA
	hits atomic.Int64
	seen atomic.Value // last request's headers as JSON
}

func newUpstream(t testing.TB, hosts ...string) *upstream {
	t.Helper()
	u := &upstream{}
	ca, err := NewCA("upstream-test")
	if err != nil {
		t.Fatal(err)
	}
	u.ca = ca
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		b, _ := json.Marshal(map[string]any{"headers": r.Header, "query": r.URL.RawQuery, "host": r.Host})
		u.seen.Store(string(b))
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "https://other.test/headers", http.StatusFound)
			return
		}
		if r.URL.Path == "/upload" { // reading the body sends 100 Continue
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "got %d bytes, auth %q", n, r.Header.Get("Authorization"))
			return
		}
		if r.URL.Path == "/early" {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			w.Write([]byte("final"))
			return
		}
		if r.URL.Path == "/split" {
			// The head and a sized body in separate writes (as Python's
			// http.server sends them): the body is read after the head
			// has left the upstream reader's buffer.
			w.Header().Set("Content-Length", "11")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond)
			w.Write([]byte("split body\n"))
			return
		}
		if r.URL.Path == "/stream" {
			w.Write([]byte("first\n"))
			w.(http.Flusher).Flush()
			time.Sleep(300 * time.Millisecond)
			w.Write([]byte("second\n"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
	u.srv = httptest.NewUnstartedServer(mux)
	u.srv.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		name := h.ServerName
		if name == "" {
			name = hosts[0]
		}
		return ca.Leaf(name)
	}}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(u.ca.Cert())
	return p
}

type harness struct {
	proxy *Proxy
	ln    net.Listener
	up    *upstream
	logs  *bytes.Buffer
	addr  string // where steered connections go (the upstream)
}

func newHarness(t *testing.T, rulesJSON string, upstreamAddr string, up *upstream, roots *x509.CertPool) *harness {
	t.Helper()
	rules, err := ParseRules(json.RawMessage(rulesJSON))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := NewCA("node-test")
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	p := &Proxy{CA: ca, RootCAs: roots, Log: slog.New(slog.NewTextHandler(&lockedWriter{w: logs}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Resolve: func(_ context.Context, name string) ([]byte, error) {
			if name == "gh" {
				return []byte(secretValue), nil
			}
			return nil, errors.New("no such secret")
		}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.HandleConn(context.Background(), c, Target{Sandbox: "sb1", Addr: upstreamAddr, Rules: rules})
		}
	}()
	return &harness{proxy: p, ln: ln, up: up, logs: logs, addr: upstreamAddr}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// client is what a sandbox would do: every connection goes to the proxy
// (as nftables steers it), trusting roots.
func (h *harness) client(roots *x509.CertPool) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", h.ln.Addr().String())
			},
			TLSClientConfig:   &tls.Config{RootCAs: roots},
			ForceAttemptHTTP2: true, // the proxy must still speak HTTP/1.1 only
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func (h *harness) sandboxRoots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(h.proxy.CA.Cert())
	p.AddCert(h.up.ca.Cert()) // for the tunnelled (unruled) names
	return p
}

const ghRule = `{"api.test":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.GH}","X-Fixed":"v"}}}]}`

func get(t *testing.T, c *http.Client, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestInjectsOnRuledDomain(t *testing.T) {
	up := newUpstream(t, "api.test")
	h := newHarness(t, ghRule, up.srv.Listener.Addr().String(), up, up.pool())
	resp, body := get(t, h.client(h.sandboxRoots()), "https://api.test/headers", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "Bearer "+secretValue) || !strings.Contains(body, `"X-Fixed":["v"]`) {
		t.Fatalf("upstream saw %d %s", resp.StatusCode, body)
	}
	if resp.ProtoMajor != 1 || resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != "Airlock egress CA node-test" {
		t.Fatalf("proto %s, the sandbox's TLS peer is not the proxy's leaf", resp.Proto)
	}
	if strings.Contains(h.logs.String(), secretValue) {
		t.Fatalf("the secret is in the proxy's log: %s", h.logs.String())
	}
}

func TestMatchersAndQuery(t *testing.T) {
	up := newUpstream(t, "api.test")
	rules := `{"api.test":[{"methods":["get"],"path":"/repos/*","transform":{"headers":{"X-Key":"${e2b.secrets.gh}"},"query":{"key":"${e2b.secrets.gh}"}}}]}`
	h := newHarness(t, rules, up.srv.Listener.Addr().String(), up, up.pool())
	c := h.client(h.sandboxRoots())
	_, body := get(t, c, "https://api.test/repos/x?a=1", nil)
	if !strings.Contains(body, `"X-Key":["`+secretValue+`"]`) || !strings.Contains(body, "key="+secretValue) || !strings.Contains(body, "a=1") {
		t.Fatalf("matched request: %s", body)
	}
	for _, u := range []string{"https://api.test/other", "https://api.test/repos/x/y"} {
		if _, body := get(t, c, u, nil); strings.Contains(body, secretValue) {
			t.Fatalf("%s (no match) got the secret: %s", u, body)
		}
	}
	req, _ := http.NewRequest("POST", "https://api.test/repos/x", strings.NewReader("{}"))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), secretValue) {
		t.Fatalf("POST (method not matched) got the secret: %s", b)
	}
}

func TestHostDiffersFromSNI(t *testing.T) {
	up := newUpstream(t, "api.test")
	h := newHarness(t, ghRule, up.srv.Listener.Addr().String(), up, up.pool())
	resp, body := get(t, h.client(h.sandboxRoots()), "https://api.test/headers", map[string]string{"Host": "other.test"})
	if resp.StatusCode != http.StatusMisdirectedRequest || up.hits.Load() != 0 {
		t.Fatalf("SNI api.test, Host other.test = %d %s (upstream hits %d)", resp.StatusCode, body, up.hits.Load())
	}
}

func TestOtherDomainTunnelledUntouched(t *testing.T) {
	up := newUpstream(t, "other.test")
	h := newHarness(t, ghRule, up.srv.Listener.Addr().String(), up, up.pool())
	resp, body := get(t, h.client(h.sandboxRoots()), "https://other.test/headers", nil)
	if resp.StatusCode != 200 || strings.Contains(body, secretValue) || strings.Contains(body, "X-Fixed") {
		t.Fatalf("other.test saw %d %s", resp.StatusCode, body)
	}
	if resp.TLS.PeerCertificates[0].Issuer.CommonName != "Airlock egress CA upstream-test" {
		t.Fatal("an unruled name was intercepted")
	}
}

func TestRedirectPassedBackNotFollowed(t *testing.T) {
	up := newUpstream(t, "api.test")
	h := newHarness(t, ghRule, up.srv.Listener.Addr().String(), up, up.pool())
	resp, _ := get(t, h.client(h.sandboxRoots()), "https://api.test/redirect", nil)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://other.test/headers" || up.hits.Load() != 1 {
		t.Fatalf("redirect = %d %q, upstream hits %d", resp.StatusCode, resp.Header.Get("Location"), up.hits.Load())
	}
}

func TestPlainHTTPNotInjected(t *testing.T) {
	var seen atomic.Value
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := json.Marshal(r.Header)
		seen.Store(string(b))
		w.Write(b)
	}))
	t.Cleanup(plain.Close)
	up := newUpstream(t, "api.test")
	h := newHarness(t, ghRule, plain.Listener.Addr().String(), up, up.pool())
	resp, body := get(t, h.client(h.sandboxRoots()), "http://api.test/headers", nil)
	if resp.StatusCode != 200 || strings.Contains(body, secretValue) || strings.Contains(body, "X-Fixed") {
		t.Fatalf("plain http = %d %s", resp.StatusCode, body)
	}
}

func TestBadUpstreamCertificate(t *testing.T) {
	up := newUpstream(t, "api.test")
	// The proxy trusts only another CA: the upstream's certificate fails.
	other, _ := NewCA("unrelated")
	roots := x509.NewCertPool()
	roots.AddCert(other.Cert())
	h := newHarness(t, ghRule, up.srv.Listener.Addr().String(), up, roots)
	_, err := h.client(h.sandboxRoots()).Get("https://api.test/headers")
	if err == nil || !strings.Contains(err.Error(), "tls") {
		t.Fatalf("GET through a proxy that cannot verify upstream: err %v; want a TLS failure", err)
	}
	if up.hits.Load() != 0 {
		t.Fatal("a request reached the unverified upstream")
	}
}

func TestStreamingNotBuffered(t *testing.T) {
	up := newUpstream(t, "api.test")
	h := newHarness(t, ghRule, up.srv.Listener.Addr().String(), up, up.pool())
	resp, err := h.client(h.sandboxRoots()).Get("https://api.test/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "first\n" || time.Since(start) > 250*time.Millisecond {
		t.Fatalf("first chunk %q %v after %v: buffered?", line, err, time.Since(start))
	}
}

// TestHeadAndBodyInSeparateWrites: a sized body that arrives after the
// head reaches the sandbox as it is (it once came back as a copy of the
// response head: flushing the writer the body was being read into).
func TestHeadAndBodyInSeparateWrites(t *testing.T) {
	up := newUpstream(t, "api.test")
	h := newHarness(t, ghRule, up.srv.Listener.Addr().String(), up, up.pool())
	for i := range 3 { // one connection, kept alive: the framing holds too
		resp, body := get(t, h.client(h.sandboxRoots()), "https://api.test/split", nil)
		if resp.StatusCode != http.StatusOK || body != "split body\n" {
			t.Fatalf("request %d: %d %q, want 200 %q", i, resp.StatusCode, body, "split body\n")
		}
	}
}

func TestUnknownSecretFailsClosed(t *testing.T) {
	up := newUpstream(t, "api.test")
	h := newHarness(t, `{"api.test":[{"transform":{"headers":{"X-K":"${e2b.secrets.missing}"}}}]}`, up.srv.Listener.Addr().String(), up, up.pool())
	resp, _ := get(t, h.client(h.sandboxRoots()), "https://api.test/headers", nil)
	if resp.StatusCode != http.StatusBadGateway || up.hits.Load() != 0 {
		t.Fatalf("missing secret = %d, upstream hits %d", resp.StatusCode, up.hits.Load())
	}
}

// A request with Expect: 100-continue (curl sends it for bodies over
// 1 MiB) completes: the sandbox gets its 100 Continue, the body goes
// upstream with the secret, and the final answer comes back, not held
// behind the 1xx.
func TestExpectContinueUpload(t *testing.T) {
	up := newUpstream(t, "api.test")
	h := newHarness(t, ghRule, up.srv.Listener.Addr().String(), up, up.pool())
	c := h.client(h.sandboxRoots())
	c.Transport.(*http.Transport).ExpectContinueTimeout = 5 * time.Second
	body := bytes.Repeat([]byte("x"), 3<<20)
	req, _ := http.NewRequest("POST", "https://api.test/upload", bytes.NewReader(body))
	req.Header.Set("Expect", "100-continue")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST with Expect: 100-continue: %v (after %s)", err, time.Since(start))
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != fmt.Sprintf("got %d bytes, auth %q", len(body), "Bearer "+secretValue) {
		t.Fatalf("upload = %d %q", resp.StatusCode, b)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("upload took %s: the sandbox waited out its Expect timeout", d)
	}
}

// An informational answer (103 Early Hints) is passed on, and the final
// answer after it reaches the sandbox.
func TestInformationalResponseRelayed(t *testing.T) {
	up := newUpstream(t, "api.test")
	h := newHarness(t, ghRule, up.srv.Listener.Addr().String(), up, up.pool())
	c := h.client(h.sandboxRoots())
	for i := range 2 { // the connection stays usable after it
		resp, body := get(t, c, "https://api.test/early", nil)
		if resp.StatusCode != 200 || body != "final" {
			t.Fatalf("request %d: GET /early = %d %q; want the final 200", i, resp.StatusCode, body)
		}
	}
}
