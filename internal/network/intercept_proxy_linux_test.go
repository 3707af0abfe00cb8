//go:build linux

package network

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
)

// TestInterceptProxyInjects joins the steering to the real egress proxy:
// a sandbox namespace resolves a ruled name through the DNS filter, makes
// an HTTPS request to it trusting only the node CA, and the upstream (its
// own CA, in the stand-in internet) sees the header the rule fills in from
// a secret the sandbox never had; a Host other than the TLS name gets no
// secret; plain HTTP to the same address is relayed untouched.
func TestInterceptProxyInjects(t *testing.T) {
	needRoot(t)
	ctx := testCtx(t)
	const secret = "s3cr3t-value-never-in-the-sandbox"
	upCA, err := egressproxy.NewCA("upstream-test")
	if err != nil {
		t.Fatal(err)
	}
	nodeCA, err := egressproxy.NewCA("node-test")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := egressproxy.ParseRules(json.RawMessage(`{"allowed.test":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.tok}"}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Cert())
	p := &egressproxy.Proxy{CA: nodeCA, RootCAs: roots, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Resolve: func(ctx context.Context, name string) ([]byte, error) { return []byte(secret), nil }}
	pl, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pl.Close() })
	go func() {
		for {
			c, err := pl.Accept()
			if err != nil {
				return
			}
			go func() {
				dst, err := egressproxy.OriginalDst(c)
				if err != nil {
					_ = c.Close()
					return
				}
				p.HandleConn(ctx, c, egressproxy.Target{Sandbox: "ip-a", Addr: dst.String(), Rules: rules})
			}()
		}
	}()
	cfg := Config{Subnet: netip.MustParsePrefix(runSubnet(9)), NamePrefix: runPrefix("ip"), DNSUpstreams: []string{dnExtDNS},
		InterceptPort: uint16(pl.Addr().(*net.TCPAddr).Port), DenyOutExcept: []netip.Prefix{netip.MustParsePrefix("10.96.5.0/29")}}
	m, err := NewManager(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	cleanupAll(t, m)
	t.Cleanup(func() {
		cleanupAll(t, m)
		if err := m.Close(context.Background(), true); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ext := makeDNSOutside(t)
	// The upstream: HTTPS on A:443 (allowed.test, its own CA) and plain
	// HTTP on A:80, both echoing the request's headers.
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := json.Marshal(map[string]any{"host": r.Host, "headers": r.Header})
		_, _ = w.Write(b)
	})
	for _, port := range []string{"443", "80"} {
		var l net.Listener
		if err := inNS(ext, func() (err error) { l, err = net.Listen("tcp4", net.JoinHostPort(dnExtA, port)); return err }); err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: echo, ReadHeaderTimeout: 5 * time.Second}
		if port == "443" {
			srv.TLSConfig = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.Leaf("allowed.test") }}
			go func() { _ = srv.ServeTLS(l, "", "") }()
		} else {
			go func() { _ = srv.Serve(l) }()
		}
		t.Cleanup(func() { _ = srv.Close() })
	}
	ep, err := m.Setup(ctx, "ip-a", 1, Options{AllowInternet: true, Intercept: []string{"allowed.test"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Teardown(context.Background(), "ip-a", 1) })
	if rc, addrs := resolveFrom(t, ep.NetNSPath, "192.0.2.53:53", "allowed.test"); rc != 0 || len(addrs) != 1 || addrs[0] != dnExtA {
		t.Fatalf("allowed.test: rcode %d, %v", rc, addrs)
	}
	// The sandbox's client: it dials from its namespace, trusts the node CA only.
	sbRoots := x509.NewCertPool()
	sbRoots.AddCert(nodeCA.Cert())
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: sbRoots, ServerName: "allowed.test"},
		DialContext: func(ctx context.Context, _, _ string) (c net.Conn, err error) {
			err = inNS(ep.NetNSPath, func() (err error) {
				c, err = (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, "tcp4", net.JoinHostPort(dnExtA, "443"))
				return err
			})
			return c, err
		},
	}}
	get := func(url, host string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if host != "" {
			req.Host = host
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s (Host %q): %v", url, host, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get("https://allowed.test/headers", ""); st != 200 || !strings.Contains(body, "Bearer "+secret) {
		t.Fatalf("ruled request: %d %s; want the injected secret", st, body)
	}
	if st, body := get("https://allowed.test/headers", "other.test"); strings.Contains(body, secret) || st == 200 {
		t.Errorf("Host other than the TLS name: %d %s; want no secret and a refusal", st, body)
	}
	// Plain HTTP to the ruled address: steered, relayed untouched.
	plain := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (c net.Conn, err error) {
		err = inNS(ep.NetNSPath, func() (err error) {
			c, err = (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, "tcp4", net.JoinHostPort(dnExtA, "80"))
			return err
		})
		return c, err
	}}}
	resp, err := plain.Get("http://allowed.test/headers")
	if err != nil {
		t.Fatalf("plain HTTP: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(b), secret) || !strings.Contains(string(b), "allowed.test") {
		t.Errorf("plain HTTP: %d %s; want the upstream's answer without the secret", resp.StatusCode, b)
	}
}
