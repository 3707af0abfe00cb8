// Command egressproxy-bench measures what internal/egressproxy adds to a
// request, in one process on loopback: sequential keep-alive GETs (p50/p99)
// and one large download (MiB/s), each straight to a local HTTPS server
// (the same-run baseline) and through the interception proxy with a
// header rule and a secret placeholder. nftables steering is not part of
// it (not built yet): this is the proxy's own cost.
//
//	go run ./bench/cmd/egressproxy-bench [-n 2000] [-mib 256]
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
)

func main() {
	n := flag.Int("n", 2000, "requests per case")
	mib := flag.Int("mib", 256, "size of the download in MiB")
	flag.Parse()

	upCA, err := egressproxy.NewCA("bench-upstream")
	check(err)
	chunk := make([]byte, 1<<20)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			for range *mib {
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
	defer up.Close()
	upAddr := up.Listener.Addr().String()
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Cert())

	rules, err := egressproxy.ParseRules(json.RawMessage(`{"api.bench":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.k}"}}}]}`))
	check(err)
	nodeCA, err := egressproxy.NewCA("bench-node")
	check(err)
	p := &egressproxy.Proxy{CA: nodeCA, RootCAs: roots, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Resolve: func(context.Context, string) ([]byte, error) { return []byte("secret-value"), nil }}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.HandleConn(context.Background(), c, egressproxy.Target{Sandbox: "bench", Addr: upAddr, Rules: rules})
		}
	}()
	clientRoots := x509.NewCertPool()
	clientRoots.AddCert(upCA.Cert())
	clientRoots.AddCert(nodeCA.Cert())
	client := func(to string) *http.Client {
		return &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", to)
			},
			TLSClientConfig: &tls.Config{RootCAs: clientRoots}, DisableCompression: true,
		}}
	}
	fmt.Printf("egressproxy-bench: %d sequential keep-alive GETs, one %d MiB download, loopback, same run\n\n", *n, *mib)
	fmt.Printf("| case | p50 | p99 | download MiB/s |\n|---|---|---|---|\n")
	var base [3]float64
	for i, c := range []struct {
		name string
		to   string
	}{{"direct (baseline)", upAddr}, {"through the proxy (rule + secret)", ln.Addr().String()}} {
		cl := client(c.to)
		lat := make([]time.Duration, 0, *n)
		for range *n {
			t0 := time.Now()
			resp, err := cl.Get("https://api.bench/small")
			check(err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat = append(lat, time.Since(t0))
		}
		sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
		p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
		t0 := time.Now()
		resp, err := cl.Get("https://api.bench/big")
		check(err)
		got, err := io.Copy(io.Discard, resp.Body)
		check(err)
		resp.Body.Close()
		rate := float64(got) / (1 << 20) / time.Since(t0).Seconds()
		fmt.Printf("| %s | %v | %v | %.0f |\n", c.name, p50.Round(time.Microsecond), p99.Round(time.Microsecond), rate)
		if i == 0 {
			base = [3]float64{float64(p50), float64(p99), rate}
		} else {
			fmt.Printf("\nadded p50 %v, p99 %v; throughput %.0f %% of direct\n",
				(p50 - time.Duration(base[0])).Round(time.Microsecond), (p99 - time.Duration(base[1])).Round(time.Microsecond), 100*rate/base[2])
		}
		cl.CloseIdleConnections()
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
