// Command cluster-hop measures what the api tier of an Airlock cluster adds
// to a request: the same operations sent to one node directly (with the
// api tier's certificate and the cluster secret, as the api tier sends them)
// and through an api instance, interleaved in one run, and prints p50/p99
// and the ratio.
//
//	go run ./bench/cmd/cluster-hop -api http://127.0.0.1:PORT -node https://127.0.0.1:NODEPORT \
//	    -node-id n1 -tls-dir STATE/tls/api -secret-file STATE/cluster-secret -api-key KEY
//
// scripts/run-cluster.sh starts a cluster on one machine and writes these
// values to its env file.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/bench/internal/stats"
	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func main() {
	api := flag.String("api", os.Getenv("E2B_API_URL"), "api tier URL (an api instance or the balancer)")
	node := flag.String("node", "", "one node's URL (its --advertise-addr)")
	secretFile := flag.String("secret-file", "", "the cluster secret (--cluster-secret-file)")
	tlsDir := flag.String("tls-dir", "", "the api tier's TLS directory (its --cluster-tls-dir)")
	nodeID := flag.String("node-id", "n1", "the node's id (its certificate names it)")
	key := flag.String("api-key", os.Getenv("E2B_API_KEY"), "API key")
	tpl := flag.String("template", "base", "template")
	commands := flag.Int("commands", 60, "command round trips per path")
	creates := flag.Int("creates", 12, "creates per path")
	flag.Parse()
	if *api == "" || *node == "" || *key == "" || *tlsDir == "" {
		fmt.Fprintln(os.Stderr, "cluster-hop: -api, -node, -tls-dir and -api-key are required")
		os.Exit(2)
	}
	secret, err := cluster.ReadSecret(*secretFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster-hop:", err)
		os.Exit(2)
	}
	m, err := clustertls.Load(*tlsDir, clustertls.RoleAPI, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster-hop:", err)
		os.Exit(2)
	}
	tr := &http.Transport{TLSClientConfig: m.ClientConfig(*nodeID)}
	if err := run(context.Background(), os.Stdout, *api, *node, secretTransport{secret, tr}, *key, *tpl, *commands, *creates); err != nil {
		fmt.Fprintln(os.Stderr, "cluster-hop:", err)
		os.Exit(1)
	}
}

// secretTransport adds the cluster secret to every request, over mutual
// TLS with the api tier's certificate, as the api tier does on its hop to a
// node.
type secretTransport struct {
	secret string
	tls    http.RoundTripper
}

func (t secretTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(cluster.HeaderSecret, t.secret)
	return t.tls.RoundTrip(r)
}

func run(ctx context.Context, out io.Writer, apiURL, nodeURL string, hop secretTransport, key, tpl string, commands, creates int) error {
	viaAPI := airlock.New(apiURL, key)
	direct := airlock.New(nodeURL, key)
	direct.HTTP = &http.Client{Transport: hop}

	// One sandbox on the node, driven both ways.
	sb, err := direct.CreateSandbox(ctx, airlock.SandboxOptions{Template: tpl, Timeout: 10 * time.Minute})
	if err != nil {
		return fmt.Errorf("creating a sandbox on the node: %w", err)
	}
	defer direct.KillSandbox(context.WithoutCancel(ctx), sb.ID)
	cmd := map[string][]time.Duration{}
	for i := 0; i < commands+2; i++ { // the first two warm connections up
		for _, p := range []struct {
			name string
			c    *airlock.Client
		}{{"direct", direct}, {"api", viaAPI}} {
			start := time.Now()
			code, err := p.c.RunShell(ctx, sb.ID, sb.AccessToken, "true")
			if err != nil || code != 0 {
				return fmt.Errorf("command through %s: exit %d, %v", p.name, code, err)
			}
			if i >= 2 {
				cmd[p.name] = append(cmd[p.name], time.Since(start))
			}
		}
	}
	// Creates (each killed, untimed). Through the api tier placement may
	// pick any node; the cluster's nodes are alike here.
	crt := map[string][]time.Duration{}
	for i := 0; i < creates; i++ {
		for _, p := range []struct {
			name string
			c    *airlock.Client
		}{{"direct", direct}, {"api", viaAPI}} {
			start := time.Now()
			s, err := p.c.CreateSandbox(ctx, airlock.SandboxOptions{Template: tpl, Timeout: time.Minute})
			if err != nil {
				return fmt.Errorf("create through %s: %w", p.name, err)
			}
			crt[p.name] = append(crt[p.name], time.Since(start))
			if err := p.c.KillSandbox(ctx, s.ID); err != nil {
				return fmt.Errorf("kill through %s: %w", p.name, err)
			}
		}
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "operation\tpath\tn\tp50\tp99\tp50 vs direct")
	for _, op := range []struct {
		name string
		m    map[string][]time.Duration
	}{{"command `true` round trip", cmd}, {"create (" + tpl + ")", crt}} {
		d50, _ := stats.P50P99(op.m["direct"])
		for _, path := range []string{"direct", "api"} {
			p50, p99 := stats.P50P99(op.m[path])
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.2f×\n", op.name, label(path), len(op.m[path]), stats.MS(p50), stats.MS(p99), float64(p50)/float64(d50))
		}
	}
	return tw.Flush()
}

func label(path string) string {
	if path == "direct" {
		return "to the node directly (cluster secret)"
	}
	return "through the api tier"
}
