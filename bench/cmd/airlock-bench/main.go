// Command airlock-bench measures a running Airlock daemon and prints a table:
// create-to-first-command latency (sequential and concurrent), command round
// trip, /files throughput, and host baselines measured in the same run.
//
// It reads the daemon URL and API key from AIRLOCK_URL/E2B_API_URL and
// AIRLOCK_API_KEY/E2B_API_KEY (see bench/run.sh).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
)

type config struct {
	url        string
	key        string
	template   string
	sequential int
	concurrent int
	commands   int
	fileMiB    int
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", firstEnv("AIRLOCK_URL", "E2B_API_URL"), "daemon URL")
	flag.StringVar(&c.key, "api-key", firstEnv("AIRLOCK_API_KEY", "E2B_API_KEY"), "API key")
	flag.StringVar(&c.template, "template", "base", "template to create sandboxes from")
	flag.IntVar(&c.sequential, "sequential", 20, "sequential creates")
	flag.IntVar(&c.concurrent, "concurrent", 10, "concurrent creates")
	flag.IntVar(&c.commands, "commands", 100, "command round trips")
	flag.IntVar(&c.fileMiB, "file-mib", 100, "MiB written and read through /files")
	flag.Parse()
	if c.url == "" || c.key == "" {
		fmt.Fprintln(os.Stderr, "airlock-bench: set AIRLOCK_URL and AIRLOCK_API_KEY (or E2B_API_URL and E2B_API_KEY)")
		os.Exit(2)
	}
	ctx := context.Background()
	if err := run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-bench:", err)
		os.Exit(1)
	}
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// row is one line of the result table.
type row struct {
	what, p50, p99, extra string
}

func run(ctx context.Context, c config, out io.Writer) error {
	cl := airlock.New(c.url, c.key)
	var rows []row
	b := &bench{cl: cl, template: c.template}
	defer b.cleanup()

	// Sequential create → first command.
	var seq []time.Duration
	for i := 0; i < c.sequential; i++ {
		d, err := b.createAndRun(ctx)
		if err != nil {
			return fmt.Errorf("sequential create %d: %w", i, err)
		}
		seq = append(seq, d)
		b.cleanup()
	}
	rows = append(rows, latRow(fmt.Sprintf("create→first command, %d sequential", c.sequential), seq, ""))

	// Concurrent creates.
	var (
		mu   sync.Mutex
		conc []time.Duration
		errs []error
		wg   sync.WaitGroup
	)
	start := time.Now()
	for i := 0; i < c.concurrent; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := b.createAndRun(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			conc = append(conc, d)
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	b.cleanup()
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d concurrent creates failed: %w", len(errs), c.concurrent, errors.Join(errs...))
	}
	rows = append(rows, latRow(fmt.Sprintf("create→first command, %d concurrent", c.concurrent), conc,
		"wall "+ms(wall)))

	// Command round trips on one sandbox.
	sbx, err := b.create(ctx)
	if err != nil {
		return err
	}
	proc := cl.Process(sbx.ID, sbx.AccessToken)
	var cmds []time.Duration
	for i := 0; i < c.commands; i++ {
		t0 := time.Now()
		if err := runTrue(ctx, proc); err != nil {
			return fmt.Errorf("command %d: %w", i, err)
		}
		cmds = append(cmds, time.Since(t0))
	}
	var host []time.Duration
	for i := 0; i < c.commands; i++ {
		t0 := time.Now()
		if err := exec.CommandContext(ctx, "true").Run(); err != nil {
			return fmt.Errorf("host exec: %w", err)
		}
		host = append(host, time.Since(t0))
	}
	rows = append(rows,
		latRow(fmt.Sprintf("command `true` round trip ×%d", c.commands), cmds,
			fmt.Sprintf("%.1f× host p50", float64(pct(cmds, 50))/float64(pct(host, 50)))),
		latRow(fmt.Sprintf("baseline: host exec `true` ×%d", c.commands), host, ""))

	// Metrics endpoints next to /health on the same listener.
	metricsRows, err := metricsLatency(ctx, c, sbx.ID, c.commands)
	if err != nil {
		return err
	}
	rows = append(rows, metricsRows...)

	// /files throughput.
	size := int64(c.fileMiB) << 20
	t0 := time.Now()
	if _, err := cl.Upload(ctx, sbx.ID, sbx.AccessToken, "/home/user/bench.bin", io.LimitReader(zeroReader{}, size)); err != nil {
		return err
	}
	up := time.Since(t0)
	t0 = time.Now()
	rc, err := cl.Download(ctx, sbx.ID, sbx.AccessToken, "/home/user/bench.bin")
	if err != nil {
		return err
	}
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	down := time.Since(t0)
	if err != nil || n != size {
		return fmt.Errorf("download: %d of %d bytes: %v", n, size, err)
	}
	bUp, bDown, err := loopbackBaseline(ctx, size)
	if err != nil {
		return fmt.Errorf("loopback baseline: %w", err)
	}
	rows = append(rows,
		row{fmt.Sprintf("/files write %d MiB", c.fileMiB), mibps(size, up), "", fmt.Sprintf("%.0f%% of baseline", 100*bUp.Seconds()/up.Seconds())},
		row{fmt.Sprintf("/files read %d MiB", c.fileMiB), mibps(size, down), "", fmt.Sprintf("%.0f%% of baseline", 100*bDown.Seconds()/down.Seconds())},
		row{"baseline: loopback HTTP → host file write", mibps(size, bUp), "", ""},
		row{"baseline: loopback HTTP ← host file read", mibps(size, bDown), "", ""},
	)

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measurement\tp50 (or MiB/s)\tp99\tnote")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.what, r.p50, r.p99, r.extra)
	}
	return tw.Flush()
}

// bench creates sandboxes and remembers them for cleanup.
type bench struct {
	cl       *airlock.Client
	template string

	mu  sync.Mutex
	ids []string
}

func (b *bench) create(ctx context.Context) (*airlock.Sandbox, error) {
	s, err := b.cl.CreateSandbox(ctx, airlock.SandboxOptions{Template: b.template, Timeout: 600 * time.Second,
		Metadata: map[string]string{"airlock-bench": "1"}})
	if err != nil {
		return nil, fmt.Errorf("creating sandbox: %w", err)
	}
	b.mu.Lock()
	b.ids = append(b.ids, s.ID)
	b.mu.Unlock()
	return s, nil
}

func (b *bench) createAndRun(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	s, err := b.create(ctx)
	if err != nil {
		return 0, err
	}
	if err := runTrue(ctx, b.cl.Process(s.ID, s.AccessToken)); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

func (b *bench) cleanup() {
	b.mu.Lock()
	ids := b.ids
	b.ids = nil
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, id := range ids {
		if err := b.cl.KillSandbox(ctx, id); err != nil && !airlock.IsNotFound(err) {
			slog.Warn("killing sandbox", "id", id, "err", err)
		}
	}
}

// runTrue runs `true` through process.Process/Start and waits for its end event.
func runTrue(ctx context.Context, proc interface {
	Start(context.Context, *connect.Request[processpb.StartRequest]) (*connect.ServerStreamForClient[processpb.StartResponse], error)
}) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stdin := false
	stream, err := proc.Start(ctx, connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "true"}},
		Stdin:   &stdin,
	}))
	if err != nil {
		return fmt.Errorf("starting command: %w", err)
	}
	defer stream.Close()
	end, err := guest.Receive(stream, guest.Events{})
	switch {
	case errors.Is(err, guest.ErrNoEnd):
		return errors.New("command stream ended without an end event")
	case err != nil:
		return fmt.Errorf("command stream: %w", err)
	case end.GetExitCode() != 0:
		return fmt.Errorf("command exited %d: %s", end.GetExitCode(), end.GetError())
	}
	return nil
}

// loopbackBaseline streams size bytes over loopback HTTP into a host file and
// back, the closest host-only equivalent of /files.
func loopbackBaseline(ctx context.Context, size int64) (up, down time.Duration, err error) {
	dir, err := os.MkdirTemp("", "airlock-bench-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "f")
	mux := http.NewServeMux()
	mux.HandleFunc("POST /f", func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Create(path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		if _, err := io.Copy(f, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("GET /f", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, path) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String() + "/f"

	t0 := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base, io.LimitReader(zeroReader{}, size))
	if err != nil {
		return 0, 0, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	res.Body.Close()
	up = time.Since(t0)

	t0 = time.Now()
	req, err = http.NewRequestWithContext(ctx, http.MethodGet, base, nil)
	if err != nil {
		return 0, 0, err
	}
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil || n != size {
		return 0, 0, fmt.Errorf("baseline read %d of %d bytes: %v", n, size, err)
	}
	return up, time.Since(t0), nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// pct returns the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (p*len(s) + 99) / 100
	if i < 1 {
		i = 1
	}
	return s[i-1]
}

func latRow(what string, ds []time.Duration, extra string) row {
	return row{what, ms(pct(ds, 50)), ms(pct(ds, 99)), extra}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func mibps(size int64, d time.Duration) string {
	return fmt.Sprintf("%.0f MiB/s", float64(size)/(1<<20)/d.Seconds())
}

// metricsLatency times n requests each of GET /sandboxes/{id}/metrics, the
// Prometheus /metrics and (baseline) GET /health.
func metricsLatency(ctx context.Context, c config, id string, n int) ([]row, error) {
	get := func(path string) (time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+path, nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("X-API-Key", c.key)
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return time.Since(t0), err
	}
	paths := []string{"/sandboxes/" + id + "/metrics", "/metrics", "/health"}
	lat := make([][]time.Duration, len(paths))
	for range n {
		for i, p := range paths {
			d, err := get(p)
			if err != nil {
				return nil, err
			}
			lat[i] = append(lat[i], d)
		}
	}
	return []row{
		latRow(fmt.Sprintf("GET /sandboxes/{id}/metrics ×%d", n), lat[0], fmt.Sprintf("%.1f× /health p50", float64(pct(lat[0], 50))/float64(pct(lat[2], 50)))),
		latRow(fmt.Sprintf("GET /metrics (Prometheus) ×%d", n), lat[1], ""),
		latRow(fmt.Sprintf("baseline: GET /health ×%d", n), lat[2], ""),
	}, nil
}
