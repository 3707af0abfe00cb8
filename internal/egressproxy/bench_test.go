package egressproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"
)

// The proxy's own cost on loopback, next to the same client straight to
// the upstream (the baseline), in one process:
//
//	go test ./internal/egressproxy -run XXX -bench . -benchtime 2s -count 3
//
// NewConnection is one GET per new TLS connection (the sandbox's
// handshake, and through the proxy its upstream connection); Download
// is a 64 MiB body on a kept-alive connection; Leaf and UpstreamHandshake
// are the parts of the new-connection path measured alone. On a shared,
// loaded host the wall time per op is mostly waiting for a CPU; cpu-ns/op
// (the process's user+system time, client and upstream included, so
// compare proxy with direct) is the steadier figure.

type benchSetup struct {
	upAddr  string
	roots   *x509.CertPool // the upstream's CA
	proxy   *Proxy
	proxyLn net.Listener
	client  *x509.CertPool // what the "sandbox" trusts: both CAs
}

func newBenchSetup(b *testing.B) *benchSetup {
	b.Helper()
	upCA, err := NewCA("bench-upstream")
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			for range 64 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			return
		}
		w.Write([]byte("ok"))
	}))
	up.TLS = &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.Leaf("api.bench") }}
	up.StartTLS()
	b.Cleanup(up.Close)
	s := &benchSetup{upAddr: up.Listener.Addr().String(), roots: x509.NewCertPool(), client: x509.NewCertPool()}
	s.roots.AddCert(upCA.Cert())
	rules, err := ParseRules(json.RawMessage(`{"api.bench":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.k}"}}}]}`))
	if err != nil {
		b.Fatal(err)
	}
	nodeCA, err := NewCA("bench-node")
	if err != nil {
		b.Fatal(err)
	}
	s.proxy = &Proxy{CA: nodeCA, RootCAs: s.roots, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Resolve: func(context.Context, string) ([]byte, error) { return []byte("secret-value"), nil }}
	s.proxyLn, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.proxyLn.Close() })
	go func() {
		for {
			c, err := s.proxyLn.Accept()
			if err != nil {
				return
			}
			go s.proxy.HandleConn(context.Background(), c, Target{Sandbox: "bench", Addr: s.upAddr, Rules: rules})
		}
	}()
	s.client.AddCert(upCA.Cert())
	s.client.AddCert(nodeCA.Cert())
	return s
}

func (s *benchSetup) httpClient(to string, keepAlive bool) *http.Client {
	return s.httpClientNagle(to, keepAlive, false)
}

// httpClientNagle: with nagle, the client's TCP has Nagle's algorithm on
// (as Python's socket.create_connection has), so its request after the
// handshake waits for the ACK of its Finished.
func (s *benchSetup) httpClientNagle(to string, keepAlive, nagle bool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", to)
			if err == nil && nagle {
				err = c.(*net.TCPConn).SetNoDelay(false)
			}
			return c, err
		},
		TLSClientConfig:   &tls.Config{RootCAs: s.client},
		DisableKeepAlives: !keepAlive,
	}}
}

func benchGet(b *testing.B, c *http.Client, url string) int64 {
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return n
}

func BenchmarkNewConnection(b *testing.B) {
	s := newBenchSetup(b)
	for _, c := range []struct {
		name, to string
		nagle    bool
	}{{"direct", s.upAddr, false}, {"proxy", s.proxyLn.Addr().String(), false},
		{"direct-nagle", s.upAddr, true}, {"proxy-nagle", s.proxyLn.Addr().String(), true}} {
		b.Run(c.name, func(b *testing.B) {
			hc := s.httpClientNagle(c.to, false, c.nagle)
			cpu := cpuTime()
			for b.Loop() {
				benchGet(b, hc, "https://api.bench/small")
			}
			reportCPU(b, cpu)
		})
	}
}

func BenchmarkDownload(b *testing.B) {
	s := newBenchSetup(b)
	for _, c := range []struct{ name, to string }{{"direct", s.upAddr}, {"proxy", s.proxyLn.Addr().String()}} {
		b.Run(c.name, func(b *testing.B) {
			hc := s.httpClient(c.to, true)
			b.SetBytes(64 << 20)
			cpu := cpuTime()
			for b.Loop() {
				benchGet(b, hc, "https://api.bench/big")
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkLeaf is minting a leaf certificate (ECDSA P-256), what the
// cache saves per new name.
func BenchmarkLeaf(b *testing.B) {
	ca, err := NewCA("bench")
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		if _, err := ca.Leaf("h" + string(rune('a'+i%26)) + ".bench." + itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

// BenchmarkUpstreamHandshake is the proxy's upstream TCP dial and
// verified TLS handshake, alone, with and without session resumption.
func BenchmarkUpstreamHandshake(b *testing.B) {
	s := newBenchSetup(b)
	for _, resume := range []bool{false, true} {
		name := "full"
		var cache tls.ClientSessionCache
		if resume {
			name, cache = "resumed", tls.NewLRUClientSessionCache(8)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				raw, err := net.Dial("tcp", s.upAddr)
				if err != nil {
					b.Fatal(err)
				}
				c := tls.Client(raw, &tls.Config{ServerName: "api.bench", RootCAs: s.roots, ClientSessionCache: cache, NextProtos: []string{"http/1.1"}})
				if err := c.Handshake(); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, since time.Duration) {
	b.ReportMetric(float64(cpuTime()-since)/float64(b.N), "cpu-ns/op")
}
