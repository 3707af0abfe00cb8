// Command soak loads a running Airlock daemon the way many agents would: N
// concurrent clients, each repeatedly creating a code-interpreter sandbox,
// running cells and commands, uploading and downloading files and killing
// it. It prints p50/p99 per operation, the error count and the daemon's RSS
// before and after, and can write the numbers as JSON for bench/report. The
// "floor: ..." rows are same-run floors of kill, cell and create (floor.go;
// the create's need -daemon-log, a debug log of the daemon).
//
//	go run ./bench/soak -profile ci            # CI: 4 clients × 1 round, few ops
//	go run ./bench/soak -profile long -duration 30m   # the soak: 20 clients, 50 cells + 50 commands per round
//
// The daemon URL and key come from AIRLOCK_URL/E2B_API_URL and
// AIRLOCK_API_KEY/E2B_API_KEY; -pid or -pid-file names the daemon for RSS.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
)

type config struct {
	url, key   string
	template   string
	clients    int
	rounds     int
	duration   time.Duration
	cells      int
	commands   int
	files      int
	fileKiB    int
	pid        int
	jsonOut    string
	profile    string
	opDeadline time.Duration
	daemonLog  string
}

// Summary is what -json writes (read by bench/report).
type Summary struct {
	Profile      string             `json:"profile"`
	Clients      int                `json:"clients"`
	Rounds       int                `json:"rounds"`
	Elapsed      float64            `json:"elapsed_s"`
	Requests     int                `json:"requests"`
	Errors       int                `json:"errors"`
	ErrorSamples []string           `json:"error_samples,omitempty"`
	Ops          map[string]OpStats `json:"ops"`
	// Floors are the same-run floor rows (floor.go); their errors count
	// in Errors, their requests not in Requests.
	Floors map[string]OpStats `json:"floors,omitempty"`
	// KillSteps are the kills' steps inside the daemon (killsteps.go).
	KillSteps    map[string]OpStats `json:"kill_steps,omitempty"`
	RSSBeforeKiB int64              `json:"daemon_rss_before_kib"`
	RSSAfterKiB  int64              `json:"daemon_rss_after_kib"`
}

// OpStats are latency percentiles of one operation, in milliseconds.
type OpStats struct {
	Count  int     `json:"count"`
	Errors int     `json:"errors"`
	P50ms  float64 `json:"p50_ms"`
	P99ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", firstEnv("AIRLOCK_URL", "E2B_API_URL"), "daemon URL")
	flag.StringVar(&c.key, "api-key", firstEnv("AIRLOCK_API_KEY", "E2B_API_KEY"), "API key")
	flag.StringVar(&c.profile, "profile", "ci", "ci (4 clients, 1 round, 5 cells, 10 commands) or long (20 clients, 50 cells, 50 commands, rounds until -duration)")
	flag.StringVar(&c.template, "template", "code-interpreter-v1", "template")
	flag.IntVar(&c.clients, "clients", 0, "concurrent clients (overrides the profile)")
	flag.IntVar(&c.rounds, "rounds", 0, "sandboxes per client (overrides the profile; with -duration: at most)")
	flag.DurationVar(&c.duration, "duration", 0, "keep starting rounds until this much time has passed (long profile)")
	flag.IntVar(&c.cells, "cells", 0, "code cells per sandbox (overrides the profile)")
	flag.IntVar(&c.commands, "commands", 0, "commands per sandbox (overrides the profile)")
	flag.IntVar(&c.files, "files", 0, "upload+download pairs per sandbox (overrides the profile)")
	flag.IntVar(&c.fileKiB, "file-kib", 256, "size of each uploaded file")
	flag.IntVar(&c.pid, "pid", 0, "daemon pid (for RSS)")
	pidFile := flag.String("pid-file", "", "file holding the daemon pid")
	flag.StringVar(&c.jsonOut, "json", "", "write the summary as JSON to this file")
	flag.StringVar(&c.daemonLog, "daemon-log", "", "the daemon's debug log, read after the run for the creates' restore and wait steps (floor rows)")
	flag.Parse()
	if c.url == "" || c.key == "" {
		fmt.Fprintln(os.Stderr, "soak: set AIRLOCK_URL and AIRLOCK_API_KEY (or E2B_API_URL and E2B_API_KEY)")
		os.Exit(2)
	}
	if *pidFile != "" && c.pid == 0 {
		if b, err := os.ReadFile(*pidFile); err == nil {
			c.pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	if err := applyProfile(&c); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	sum := run(context.Background(), c)
	printSummary(os.Stdout, sum)
	if c.jsonOut != "" {
		b, _ := json.MarshalIndent(sum, "", "  ")
		if err := os.WriteFile(c.jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(1)
		}
	}
	if sum.Errors > 0 {
		os.Exit(1)
	}
}

func applyProfile(c *config) error {
	def := map[string][5]int{ // clients, rounds, cells, commands, files
		"ci":   {4, 1, 5, 10, 2},
		"long": {20, 1 << 30, 50, 50, 5},
	}
	p, ok := def[c.profile]
	if !ok {
		return fmt.Errorf("unknown profile %q (ci or long)", c.profile)
	}
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	set(&c.clients, p[0])
	set(&c.rounds, p[1])
	set(&c.cells, p[2])
	set(&c.commands, p[3])
	set(&c.files, p[4])
	if c.profile == "long" && c.duration == 0 {
		c.duration = 10 * time.Minute
	}
	c.opDeadline = 3 * time.Minute
	return nil
}

// recorder collects per-operation latencies and errors, and the ids of
// the sandboxes created (to find their steps in the daemon's log).
type recorder struct {
	mu      sync.Mutex
	lat     map[string][]time.Duration
	errs    map[string]int
	samples []string
	ids     map[string]bool
	// killWall is, per sandbox, when its kill's request was written and
	// when its answer's first byte came (reqtiming.go).
	killWall map[string]wallTimes
}

func (r *recorder) do(op string, f func() error) error {
	start := time.Now()
	err := f()
	d := time.Since(start)
	if err != nil {
		r.fail(op, err)
		return err
	}
	r.add(op, d)
	return nil
}

// add records latencies of op measured elsewhere.
func (r *recorder) add(op string, ds ...time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lat[op] = append(r.lat[op], ds...)
}

// fail records an error of op.
func (r *recorder) fail(op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs[op]++
	if len(r.samples) < 10 {
		r.samples = append(r.samples, op+": "+err.Error())
	}
}

// created records a sandbox the soak created.
func (r *recorder) created(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids[id] = true
}

func run(ctx context.Context, c config) Summary {
	sdk := airlock.New(c.url, c.key)
	cl := airlock.New(c.url, c.key)
	rec := &recorder{lat: map[string][]time.Duration{}, errs: map[string]int{}, ids: map[string]bool{}, killWall: map[string]wallTimes{}}
	before := rssKiB(c.pid)
	start := time.Now()
	var wg sync.WaitGroup
	var roundsMu sync.Mutex
	rounds := 0
	for i := 0; i < c.clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for r := 0; r < c.rounds; r++ {
				if c.duration > 0 && time.Since(start) > c.duration {
					return
				}
				oneRound(ctx, c, sdk, cl, rec, i, r)
				roundsMu.Lock()
				rounds++
				roundsMu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if c.daemonLog != "" {
		steps, err := createFloors(c.daemonLog, rec.ids)
		switch {
		case err != nil:
			fmt.Fprintln(os.Stderr, "soak:", err)
		case len(steps[floorRestoreWait]) == 0:
			fmt.Fprintln(os.Stderr, "soak: no create steps of this run in", c.daemonLog, "(is the daemon's --log-level debug?)")
		}
		for op, ds := range steps {
			rec.add(op, ds...)
		}
		ks, err := killSteps(c.daemonLog, rec.ids)
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
		}
		for op, ds := range ks {
			rec.add(op, ds...)
		}
		rt, err := requestTimings(c.daemonLog, rec.ids, rec.killWall)
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
		}
		for op, ds := range rt {
			rec.add(op, ds...)
		}
	}
	sum := Summary{
		Profile: c.profile, Clients: c.clients, Rounds: rounds, Elapsed: time.Since(start).Seconds(),
		Ops: map[string]OpStats{}, Floors: map[string]OpStats{}, KillSteps: map[string]OpStats{}, RSSBeforeKiB: before, RSSAfterKiB: rssKiB(c.pid), ErrorSamples: rec.samples,
	}
	ops := map[string]bool{}
	for op := range rec.lat {
		ops[op] = true
	}
	for op := range rec.errs {
		ops[op] = true
	}
	for op := range ops {
		l := rec.lat[op]
		sort.Slice(l, func(a, b int) bool { return l[a] < l[b] })
		st := OpStats{Count: len(l) + rec.errs[op], Errors: rec.errs[op]}
		if len(l) > 0 {
			st.P50ms = ms(pct(l, 50))
			st.P99ms = ms(pct(l, 99))
			st.MaxMs = ms(l[len(l)-1])
		}
		sum.Errors += st.Errors
		if isKillStep(op) {
			sum.KillSteps[op] = st
			continue
		}
		if isFloor(op) {
			sum.Floors[op] = st
			continue
		}
		sum.Ops[op] = st
		sum.Requests += st.Count
	}
	return sum
}

// oneRound is one client's sandbox lifetime.
func oneRound(ctx context.Context, c config, sdk *airlock.Client, cl *airlock.Client, rec *recorder, clientN, round int) {
	var sb *airlock.Sandbox
	if rec.do("create", func() error {
		cctx, cancel := context.WithTimeout(ctx, c.opDeadline)
		defer cancel()
		var err error
		sb, err = sdk.CreateSandbox(cctx, airlock.SandboxOptions{Template: c.template, Timeout: 30 * time.Minute,
			Metadata: map[string]string{"soak": "1"}})
		return err
	}) != nil {
		return
	}
	rec.created(sb.ID)
	defer func() {
		_ = rec.do("kill", func() error {
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opDeadline)
			defer cancel()
			kctx, done := traceKill(kctx, rec, sb.ID)
			err := sb.Kill(kctx)
			done(err)
			return err
		})
	}()
	proc := cl.Process(sb.ID, sb.AccessToken)
	for i := 0; i < c.cells; i++ {
		want := strconv.Itoa(clientN*1_000_000 + round*1000 + i)
		_ = rec.do("cell", func() error {
			cctx, cancel := context.WithTimeout(ctx, c.opDeadline)
			defer cancel()
			ex, err := sb.RunCode(cctx, fmt.Sprintf("x_%d = %s\nprint(x_%d)", i, want, i))
			if err != nil {
				return err
			}
			if ex.Error != nil {
				return fmt.Errorf("cell error: %s", ex.Error.Error())
			}
			if got := strings.TrimSpace(strings.Join(ex.Logs.Stdout, "")); got != want {
				return fmt.Errorf("cell printed %q, want %q", got, want)
			}
			return nil
		})
		if i%floorEvery == floorEvery-1 || i == c.cells-1 {
			daemonFloor(ctx, c, sdk, rec, sb.ID)
			agentFloor(ctx, c, rec, sb)
		}
		if i == min(floorCellAt, c.cells)-1 {
			cellFloor(ctx, c, proc, sb.AccessToken, rec, clientN*1_000_000+round*1000+900)
		}
	}
	for i := 0; i < c.commands; i++ {
		want := strconv.Itoa(i)
		_ = rec.do("command", func() error {
			cctx, cancel := context.WithTimeout(ctx, c.opDeadline)
			defer cancel()
			out, err := command(cctx, proc, "echo "+want)
			if err != nil {
				return err
			}
			if strings.TrimSpace(out) != want {
				return fmt.Errorf("command printed %q, want %q", out, want)
			}
			return nil
		})
	}
	for i := 0; i < c.files; i++ {
		data := make([]byte, c.fileKiB<<10)
		_, _ = rand.Read(data)
		path := fmt.Sprintf("/home/user/soak-%d.bin", i)
		if rec.do("upload", func() error {
			cctx, cancel := context.WithTimeout(ctx, c.opDeadline)
			defer cancel()
			_, err := cl.Upload(cctx, sb.ID, sb.AccessToken, path, bytes.NewReader(data))
			return err
		}) != nil {
			continue
		}
		_ = rec.do("download", func() error {
			cctx, cancel := context.WithTimeout(ctx, c.opDeadline)
			defer cancel()
			rc, err := cl.Download(cctx, sb.ID, sb.AccessToken, path)
			if err != nil {
				return err
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			if err != nil {
				return err
			}
			if !bytes.Equal(got, data) {
				return fmt.Errorf("downloaded %d bytes differ from the %d uploaded", len(got), len(data))
			}
			return nil
		})
	}
}

// processStarter is the agent's process service (Start).
type processStarter interface {
	Start(context.Context, *connect.Request[processpb.StartRequest]) (*connect.ServerStreamForClient[processpb.StartResponse], error)
}

// command runs cmd with bash and returns its stdout.
func command(ctx context.Context, proc processStarter, cmd string) (string, error) {
	out, _, err := commandOutput(ctx, proc, cmd)
	return out, err
}

// commandOutput runs cmd with bash and returns its stdout and stderr.
func commandOutput(ctx context.Context, proc processStarter, cmd string) (string, string, error) {
	stdin := false
	stream, err := proc.Start(ctx, connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}},
		Stdin:   &stdin,
	}))
	if err != nil {
		return "", "", fmt.Errorf("starting command: %w", err)
	}
	defer stream.Close()
	var out, errOut strings.Builder
	end, err := guest.Receive(stream, guest.Events{Data: func(stdout, stderr, _ []byte) error {
		out.Write(stdout)
		errOut.Write(stderr)
		return nil
	}})
	switch {
	case errors.Is(err, guest.ErrNoEnd):
		return out.String(), errOut.String(), errors.New("command stream ended without an end event")
	case err != nil:
		return out.String(), errOut.String(), fmt.Errorf("command stream: %w", err)
	case end.GetExitCode() != 0:
		return out.String(), errOut.String(), fmt.Errorf("command exited %d", end.GetExitCode())
	}
	return out.String(), errOut.String(), nil
}

func printSummary(w io.Writer, s Summary) {
	fmt.Fprintf(w, "soak (%s): %d clients, %d sandbox rounds in %.1f s; %d requests, %d errors\n",
		s.Profile, s.Clients, s.Rounds, s.Elapsed, s.Requests, s.Errors)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tcount\terrors\tp50 ms\tp99 ms\tmax ms\t")
	ops := make([]string, 0, len(s.Ops))
	for op := range s.Ops {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		o := s.Ops[op]
		row(tw, op, o)
	}
	for _, op := range floorOrder {
		if o, ok := s.Floors[op]; ok {
			row(tw, op, o)
		}
	}
	for _, op := range append(killStepOrder, requestTimingOrder...) {
		if o, ok := s.KillSteps[op]; ok {
			row(tw, op, o)
		}
	}
	_ = tw.Flush()
	if len(s.Floors) > 0 {
		fmt.Fprintln(w, floorNote)
	}
	if len(s.KillSteps) > 0 {
		fmt.Fprintln(w, killStepNote)
	}
	if _, ok := s.KillSteps[killRequestPrefix+rowHandler]; ok {
		fmt.Fprintln(w, requestTimingNote)
	}
	if s.RSSBeforeKiB > 0 {
		fmt.Fprintf(w, "daemon RSS: %d KiB before, %d KiB after\n", s.RSSBeforeKiB, s.RSSAfterKiB)
	}
	for _, e := range s.ErrorSamples {
		fmt.Fprintln(w, "error:", e)
	}
}

// row prints one op's line of the table.
func row(w io.Writer, op string, o OpStats) {
	fmt.Fprintf(w, "%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t\n", op, o.Count, o.Errors, o.P50ms, o.P99ms, o.MaxMs)
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	if i > len(sorted) {
		i = len(sorted)
	}
	return sorted[i-1]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func rssKiB(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}
