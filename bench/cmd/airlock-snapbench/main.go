// Command airlock-snapbench measures pause, resume and fork of a running
// Airlock daemon and prints p50/p99 next to a baseline measured in the same
// run (create → first command of a fresh sandbox):
//
//	pause            POST /sandboxes/{id}/pause → 204
//	resume           POST /sandboxes/{id}/resume → 201 (agent answering)
//	resume→command   resume plus the first command in the resumed sandbox
//	fork ×1, ×N      POST /fork → 201 (all children initialised) plus a
//	                 command in every child
//
// It reads the daemon URL and API key like airlock-bench (bench/run.sh).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
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
	url, key, template string
	n                  int
	forks              int
	forkRuns           int
	gap                time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", firstEnv("AIRLOCK_URL", "E2B_API_URL"), "daemon URL")
	flag.StringVar(&c.key, "api-key", firstEnv("AIRLOCK_API_KEY", "E2B_API_KEY"), "API key")
	flag.StringVar(&c.template, "template", "base", "template")
	flag.IntVar(&c.n, "n", 10, "samples for the baseline, pause and resume")
	flag.IntVar(&c.forks, "forks", 10, "children in the large fork")
	flag.IntVar(&c.forkRuns, "fork-runs", 5, "repetitions of each fork size")
	flag.DurationVar(&c.gap, "pause-gap", 1500*time.Millisecond, "time paused before each resume (runsc deletes the stopped container in the background for ~1 s after a pause; a resume within that waits for it)")
	flag.Parse()
	if c.url == "" || c.key == "" {
		fmt.Fprintln(os.Stderr, "airlock-snapbench: set AIRLOCK_URL and AIRLOCK_API_KEY (or E2B_API_URL and E2B_API_KEY)")
		os.Exit(2)
	}
	if err := run(context.Background(), c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-snapbench:", err)
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

type bench struct {
	cl       *airlock.Client
	template string

	mu    sync.Mutex
	ids   []string
	token map[string]string
}

func (b *bench) track(s airlock.SandboxInfo) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ids = append(b.ids, s.SandboxID)
	b.token[s.SandboxID] = s.EnvdAccessToken
}

func (b *bench) create(ctx context.Context) (*airlock.Sandbox, error) {
	s, err := b.cl.CreateSandbox(ctx, airlock.SandboxOptions{Template: b.template, Timeout: 900 * time.Second,
		Metadata: map[string]string{"airlock-bench": "snapshots"}})
	if err != nil {
		return nil, fmt.Errorf("creating sandbox: %w", err)
	}
	b.track(s.Info)
	return s, nil
}

func (b *bench) cleanup() {
	b.mu.Lock()
	ids := b.ids
	b.ids = nil
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, id := range ids {
		if err := b.cl.KillSandbox(ctx, id); err != nil && !airlock.IsNotFound(err) {
			slog.Warn("killing sandbox", "id", id, "err", err)
		}
	}
}

func (b *bench) command(ctx context.Context, id, token string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stdin := false
	stream, err := b.cl.Process(id, token).Start(ctx, connect.NewRequest(&processpb.StartRequest{
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
		return fmt.Errorf("command exited %d", end.GetExitCode())
	}
	return nil
}

type row struct{ what, p50, p99, extra string }

func run(ctx context.Context, c config, out io.Writer) error {
	b := &bench{cl: airlock.New(c.url, c.key), template: c.template, token: map[string]string{}}
	defer b.cleanup()
	var rows []row

	// Baseline: create → first command, fresh sandboxes.
	var base []time.Duration
	for i := 0; i < c.n; i++ {
		t0 := time.Now()
		s, err := b.create(ctx)
		if err != nil {
			return err
		}
		if err := b.command(ctx, s.ID, s.AccessToken); err != nil {
			return err
		}
		base = append(base, time.Since(t0))
		b.cleanup()
	}
	rows = append(rows, latRow(fmt.Sprintf("baseline: create→first command (%d)", c.n), base, ""))

	// Pause / resume cycles on one sandbox with a running process.
	s, err := b.create(ctx)
	if err != nil {
		return err
	}
	if err := b.command(ctx, s.ID, s.AccessToken); err != nil {
		return err
	}
	var pause, resume, resumeCmd []time.Duration
	for i := 0; i < c.n; i++ {
		t0 := time.Now()
		if err := b.cl.PauseSandbox(ctx, s.ID); err != nil {
			return err
		}
		pause = append(pause, time.Since(t0))
		time.Sleep(c.gap)
		t0 = time.Now()
		if _, err := b.cl.ResumeSandbox(ctx, s.ID, 900); err != nil {
			return err
		}
		resume = append(resume, time.Since(t0))
		if err := b.command(ctx, s.ID, s.AccessToken); err != nil {
			return err
		}
		resumeCmd = append(resumeCmd, time.Since(t0))
	}
	rows = append(rows,
		latRow(fmt.Sprintf("pause (%d)", c.n), pause, ""),
		latRow(fmt.Sprintf("resume → 201 (%d)", c.n), resume, fmt.Sprintf("paused %v before", c.gap)),
		latRow(fmt.Sprintf("resume → first command (%d)", c.n), resumeCmd, ""))

	// Forks.
	for _, count := range []int{1, c.forks} {
		var walls []time.Duration
		failed := 0
		for i := 0; i < c.forkRuns; i++ {
			t0 := time.Now()
			res, err := b.cl.ForkSandbox(ctx, s.ID, count, 900)
			if err != nil {
				return err
			}
			var wg sync.WaitGroup
			errs := make([]error, len(res))
			for j, r := range res {
				if r.Sandbox == nil {
					return fmt.Errorf("fork child %d: %+v", j, r.Error)
				}
				b.track(*r.Sandbox)
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[j] = b.command(ctx, r.Sandbox.SandboxID, r.Sandbox.EnvdAccessToken)
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				// Reported, not fatal: one failed child must not hide the
				// other numbers.
				failed++
				slog.Warn("fork child command failed", "err", err)
			} else {
				walls = append(walls, time.Since(t0))
			}
			// Kill the children, keep the parent.
			b.mu.Lock()
			kids := b.ids[len(b.ids)-len(res):]
			b.ids = b.ids[:len(b.ids)-len(res)]
			b.mu.Unlock()
			for _, id := range kids {
				_ = b.cl.KillSandbox(ctx, id)
			}
		}
		rows = append(rows, latRow(fmt.Sprintf("fork ×%d → every child ran a command (%d runs)", count, c.forkRuns), walls,
			fmt.Sprintf("%.0f ms/child, %d runs with a failed child", float64(pct(walls, 50).Milliseconds())/float64(count), failed)))
	}

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measurement\tp50\tp99\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.what, r.p50, r.p99, r.extra)
	}
	return tw.Flush()
}

// pct returns the p-th percentile (nearest rank) without reordering ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}

func latRow(what string, ds []time.Duration, extra string) row {
	return row{what, ms(pct(ds, 50)), ms(pct(ds, 99)), extra}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }
