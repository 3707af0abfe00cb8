// Command seqcreate measures sequential creates with idle sandboxes alive
// (issue 24: "sequential creates with 24 interpreter sandboxes already
// alive: ≥ 3 creates per second, create to first cell").
//
// It runs the same sequence twice against a running daemon, through its E2B
// REST API (the Go SDK):
//
//   - floor: with none of its own sandboxes alive, M iterations of create →
//     first cell → second cell → kill;
//   - loaded: N sandboxes created one after another (each runs one cell and
//     stays idle), a settle pause, then the same M iterations.
//
// Each iteration times the create, the first cell (the create-to-first-cell
// figure is their sum) and a second cell in the same sandbox (the first
// cell's floor); the kill is timed apart. The rate is iterations per second
// of the whole loop (kills included) and of create-to-first-cell alone.
// With -daemon-log (the daemon at --log-level debug) it also prints, per
// phase, how many creates the warm pool served (and how many of those
// waited for a fill under way) and the daemon's own step times of those
// creates and of their pool fills, from the "step" debug lines.
//
//	AIRLOCK_URL=… AIRLOCK_API_KEY=… go run ./bench/seqcreate -n 24 -m 30 -daemon-log /var/lib/x.log
//
// bench/seqcreate/daemon.sh starts a private daemon for it.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

type config struct {
	n, m      int
	template  string
	cell      string
	settle    time.Duration
	daemonLog string
	floor     bool
	cgroup    string
}

func main() {
	var c config
	flag.IntVar(&c.n, "n", 24, "idle sandboxes alive during the loaded phase (each runs one cell)")
	flag.IntVar(&c.m, "m", 30, "sequential iterations per phase")
	flag.StringVar(&c.template, "template", "code-interpreter-v1", "template")
	flag.StringVar(&c.cell, "cell", "1+1", "the cell each iteration runs (twice)")
	flag.DurationVar(&c.settle, "settle", 15*time.Second, "pause after the N creates before the loaded phase (the warm pool refills)")
	flag.StringVar(&c.daemonLog, "daemon-log", "", "the daemon's debug log: pool hits and the creates' step times")
	flag.BoolVar(&c.floor, "floor", true, "run the phase with none alive first")
	flag.StringVar(&c.cgroup, "cgroup-parent", "/sys/fs/cgroup/cpuacct/airlock", "the sandboxes' parent CPU cgroup (cgroup v1 cpuacct): each new sandbox's CPU so far is read right after its create (\"\": not read)")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "seqcreate:", err)
		os.Exit(1)
	}
}

// iteration is one create → first cell → second cell → kill.
type iteration struct {
	id                          string
	create, first, second, kill time.Duration
	// cpu is the sandbox's host CPU (its cgroup) read right after the
	// create: its restore, wake and warm-up, and its idle time since (0:
	// not read).
	cpu time.Duration
}

// phase is one sequence of iterations.
type phase struct {
	name    string
	alive   int
	its     []iteration
	fails   []string
	start   time.Time
	elapsed time.Duration // the whole loop, kills included
	load    [2]string     // load average before and after
}

func run(c config) error {
	cl := airlock.FromEnv()
	if cl.APIKey == "" {
		return fmt.Errorf("set AIRLOCK_API_KEY or E2B_API_KEY (and AIRLOCK_URL or E2B_API_URL)")
	}
	ctx := context.Background()
	var phases []*phase
	if c.floor {
		phases = append(phases, sequence(ctx, cl, c, "floor: none alive", 0))
	}
	var alive []*airlock.Sandbox
	defer func() {
		for _, s := range alive {
			kctx, cancel := context.WithTimeout(ctx, time.Minute)
			_ = s.Kill(kctx)
			cancel()
		}
	}()
	t0 := time.Now()
	for i := 0; i < c.n; i++ {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		s, err := cl.CreateSandbox(cctx, airlock.SandboxOptions{Template: c.template, Timeout: time.Hour, Metadata: map[string]string{"bench": "seqcreate-idle"}})
		if err == nil {
			alive = append(alive, s)
			err = cell(cctx, s, c.cell)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("idle sandbox %d: %w", i, err)
		}
	}
	fmt.Fprintf(os.Stderr, "seqcreate: %d idle sandboxes alive after %.1f s; settling %v\n", len(alive), time.Since(t0).Seconds(), c.settle)
	time.Sleep(c.settle)
	phases = append(phases, sequence(ctx, cl, c, fmt.Sprintf("loaded: %d alive", len(alive)), len(alive)))

	var steps map[string]*logInfo
	if c.daemonLog != "" {
		f, err := os.Open(c.daemonLog)
		if err != nil {
			return fmt.Errorf("reading the daemon log: %w", err)
		}
		steps, err = parseLog(f)
		f.Close()
		if err != nil {
			return err
		}
	}
	for _, p := range phases {
		report(os.Stdout, p, steps)
	}
	return nil
}

// sequence runs c.m iterations.
func sequence(ctx context.Context, cl *airlock.Client, c config, name string, alive int) *phase {
	start := time.Now()
	p := &phase{name: name, alive: alive, start: start, load: [2]string{loadAvg(), ""}}
	for i := 0; i < c.m; i++ {
		var it iteration
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		t0 := time.Now()
		s, err := cl.CreateSandbox(cctx, airlock.SandboxOptions{Template: c.template, Timeout: 10 * time.Minute, Metadata: map[string]string{"bench": "seqcreate"}})
		it.create = time.Since(t0)
		if err == nil {
			it.id = s.ID
			it.cpu = cgroupCPU(c.cgroup, s.ID)
			t1 := time.Now()
			if err = cell(cctx, s, c.cell); err == nil {
				it.first = time.Since(t1)
				t2 := time.Now()
				if err = cell(cctx, s, c.cell); err == nil {
					it.second = time.Since(t2)
				}
			}
			t3 := time.Now()
			kctx, kcancel := context.WithTimeout(ctx, time.Minute)
			if kerr := s.Kill(kctx); kerr != nil && err == nil {
				err = fmt.Errorf("kill: %w", kerr)
			}
			kcancel()
			it.kill = time.Since(t3)
		}
		cancel()
		if err != nil {
			p.fails = append(p.fails, fmt.Sprintf("iteration %d: %v", i, err))
			fmt.Fprintf(os.Stderr, "seqcreate: %s: iteration %d: %v\n", name, i, err)
			continue
		}
		p.its = append(p.its, it)
	}
	p.elapsed = time.Since(start)
	p.load[1] = loadAvg()
	return p
}

// cell runs code and checks it raised nothing.
func cell(ctx context.Context, s *airlock.Sandbox, code string) error {
	ex, err := s.RunCode(ctx, code)
	if err != nil {
		return err
	}
	if ex.Error != nil {
		return fmt.Errorf("cell error: %s", ex.Error.Error())
	}
	return nil
}

// report prints one phase.
func report(w io.Writer, p *phase, logs map[string]*logInfo) {
	var create, first, total, second, kill, cpu []time.Duration
	var sumTotal time.Duration
	for _, it := range p.its {
		create = append(create, it.create)
		first = append(first, it.first)
		total = append(total, it.create+it.first)
		second = append(second, it.second)
		kill = append(kill, it.kill)
		if it.cpu > 0 {
			cpu = append(cpu, it.cpu)
		}
		sumTotal += it.create + it.first
	}
	fmt.Fprintf(w, "\n%s (%s): %d iterations, %d failed; load average %s → %s\n", p.name, p.start.UTC().Format(time.RFC3339), len(p.its), len(p.fails), p.load[0], p.load[1])
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "what\tp50 ms\tp99 ms\tmean ms")
	for _, r := range []struct {
		name string
		ds   []time.Duration
	}{{"create → first cell result", total}, {"  of which create", create}, {"  of which first cell", first},
		{"floor: second cell, same sandbox", second}, {"kill (not in the rate)", kill},
		{"the new sandbox's host CPU at its create (restore, warm-up, idle since; cgroup)", cpu}} {
		p50, p99, mean := pcts(r.ds)
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\n", r.name, p50, p99, mean)
	}
	tw.Flush()
	if n := len(p.its); n > 0 {
		fmt.Fprintf(w, "rate: %.2f per second create → first cell (%d in %.1f s); %.2f per second with the second cell and the kill (%.1f s)\n",
			float64(n)/sumTotal.Seconds(), n, sumTotal.Seconds(), float64(n)/p.elapsed.Seconds(), p.elapsed.Seconds())
	}
	for _, f := range p.fails {
		fmt.Fprintln(w, "  ", f)
	}
	if logs == nil {
		return
	}
	hits, waited, restores := 0, 0, 0
	rows := map[string][]time.Duration{}
	for _, it := range p.its {
		li := logs[it.id]
		if li == nil {
			continue
		}
		switch {
		case li.pool:
			hits++
			if li.waited {
				waited++
			}
		case li.restore:
			restores++
		}
		for k, d := range li.steps {
			rows[k] = append(rows[k], d)
		}
	}
	fmt.Fprintf(w, "warm pool: %d of %d creates served from the pool (%d of them waited for a fill under way); %d restored on the create's path\n",
		hits, len(p.its), waited, restores)
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "daemon step (op/kind/step)\tn\tp50 ms\tp99 ms\tmean ms")
	for _, k := range keys {
		p50, p99, mean := pcts(rows[k])
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\n", k, len(rows[k]), p50, p99, mean)
	}
	tw.Flush()
}

// bareRestore is the step key of the runtime's own `runsc restore` (the
// "sandbox restored" debug line), the floor of a create beyond the pool.
const bareRestore = "floor: bare runsc restore (runtime debug line)"

// logInfo is what the daemon's debug log says about one sandbox's create.
type logInfo struct {
	pool, waited, restore bool
	steps                 map[string]time.Duration // "op/kind/step"
}

// parseLog reads slog text lines: "msg=step … sandbox=<id> op=<op>
// kind=<kind> step=<s> elapsed=<d>" and "msg=\"sandbox created from the
// warm pool\" sandbox=<id> … waited_for_fill=<bool>".
func parseLog(r io.Reader) (map[string]*logInfo, error) {
	out := map[string]*logInfo{}
	get := func(id string) *logInfo {
		li := out[id]
		if li == nil {
			li = &logInfo{steps: map[string]time.Duration{}}
			out[id] = li
		}
		return li
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		isStep := strings.Contains(line, " msg=step ")
		isPool := strings.Contains(line, `msg="sandbox created from the warm pool"`)
		isBare := strings.Contains(line, `msg="sandbox restored"`)
		if !isStep && !isPool && !isBare {
			continue
		}
		kv := fields(line)
		id := kv["sandbox"]
		if isBare {
			id = kv["id"]
		}
		if id == "" {
			continue
		}
		li := get(id)
		if isBare {
			// The runtime's own `runsc restore` of this sandbox (gVisor's
			// debug line): the floor of a fill, measured in the same run.
			d, err := time.ParseDuration(kv["took"])
			if err != nil {
				return nil, fmt.Errorf("restore line %q: %w", line, err)
			}
			li.steps[bareRestore] += d
			continue
		}
		if isPool {
			li.pool, li.waited = true, kv["waited_for_fill"] == "true"
			continue
		}
		d, err := time.ParseDuration(kv["elapsed"])
		if err != nil {
			return nil, fmt.Errorf("step line %q: %w", line, err)
		}
		if kv["op"] == "create" && kv["kind"] == "restore" {
			li.restore = true
		}
		li.steps[kv["op"]+"/"+kv["kind"]+"/"+kv["step"]] += d
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the daemon log: %w", err)
	}
	return out, nil
}

// fields splits an slog text line into key=value pairs (values without
// spaces, or quoted).
func fields(line string) map[string]string {
	kv := map[string]string{}
	for line != "" {
		line = strings.TrimLeft(line, " ")
		k, rest, ok := strings.Cut(line, "=")
		if !ok {
			break
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			end := strings.Index(rest[1:], `"`)
			if end < 0 {
				end = len(rest) - 1
			}
			v, line = rest[1:1+end], rest[min(len(rest), end+2):]
		} else {
			v, line, _ = strings.Cut(rest, " ")
		}
		kv[k] = v
	}
	return kv
}

// pcts returns p50, p99 and the mean of ds in milliseconds.
func pcts(ds []time.Duration) (p50, p99, mean float64) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) float64 { return ms(s[min(len(s)-1, int(q*float64(len(s))))]) }
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return at(0.5), at(0.99), ms(sum) / float64(len(s))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// cgroupCPU reads the CPU time of sandbox id's cgroup under parent (0 when
// unreadable).
func cgroupCPU(parent, id string) time.Duration {
	if parent == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(parent, id, "cpuacct.usage"))
	if err != nil {
		return 0
	}
	ns, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return time.Duration(ns)
}

// loadAvg is /proc/loadavg's first three fields.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
