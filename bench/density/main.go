//go:build linux

// Command density measures what idle sandboxes cost the host (issue 24): it
// creates N sandboxes one after another on a running daemon (each runs one
// cell, or `true` where the template has no interpreter), lets them sit, and
// reads from /proc the CPU ticks of each sandbox's host process tree (the
// runsc sandbox, its gofer and the platform's stub processes) over a window,
// their PSS, and MemAvailable before and after. Next to it, in the same run,
// it measures bare `runsc run` sandboxes of an idle busybox shell: the
// runtime's own floor.
//
//	go run ./bench/density -n 10 -template code-interpreter-v1
//	go run ./bench/density -n 10 -template base
//
// The daemon URL and key come from AIRLOCK_URL/E2B_API_URL and
// AIRLOCK_API_KEY/E2B_API_KEY. Run as root (runsc, /proc of other users).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime/gvisor"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// clkTck is USER_HZ, the unit of /proc/<pid>/stat times on Linux.
const clkTck = 100

type config struct {
	n        int
	template string
	cell     string
	window   time.Duration
	settle   time.Duration
	rounds   int
	baseline int
	runsc    string
	platform string
	keep     bool
	rtt      int
	maxFail  int
	extra    int
	daemon   int
}

func main() {
	var c config
	flag.IntVar(&c.n, "n", 10, "sandboxes to create")
	flag.StringVar(&c.template, "template", "code-interpreter-v1", "template")
	flag.StringVar(&c.cell, "cell", "x = 1 + 1\nprint(x)", "cell each sandbox runs once (templates without an interpreter run `true` instead; empty: nothing)")
	flag.DurationVar(&c.window, "window", 30*time.Second, "measurement window")
	flag.DurationVar(&c.settle, "settle", 10*time.Second, "wait after the creates before measuring")
	flag.IntVar(&c.rounds, "rounds", 1, "measurement windows (each printed)")
	flag.IntVar(&c.baseline, "baseline", 3, "bare runsc sandboxes of an idle busybox shell measured in the same run (0: none)")
	flag.StringVar(&c.runsc, "runsc", gvisor.DefaultRunscPath(), "runsc binary for the baseline")
	flag.StringVar(&c.platform, "platform", "systrap", "runsc platform for the baseline")
	flag.BoolVar(&c.keep, "keep", false, "leave the sandboxes running")
	flag.IntVar(&c.rtt, "rtt", 20, "command round trips (`true`) timed on the first sandbox while it is alone, and again on sandboxes spread over the set once all are alive")
	flag.IntVar(&c.daemon, "daemon-pid", 0, "pid of the daemon, whose own CPU (and its reaped children's: runsc events, runsc kill) is shared out per sandbox (0: the `airlock serve` process listening on the URL's port)")
	flag.IntVar(&c.maxFail, "max-failures", 5, "failed creates tolerated (counted and printed) before the run stops")
	flag.IntVar(&c.extra, "extra", 0, "after the measurement, this many more sequential creates (create + first cell) timed while the N sandboxes are alive, next to the first ones of the run (killed once timed)")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "density:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	cl := airlock.FromEnv()
	if cl.APIKey == "" {
		return fmt.Errorf("set AIRLOCK_API_KEY or E2B_API_KEY (and AIRLOCK_URL or E2B_API_URL)")
	}
	ctx := context.Background()
	memBefore := memAvailable()
	if c.daemon == 0 {
		c.daemon = findDaemon(cl.BaseURL())
	}

	var base *baseline
	if c.baseline > 0 {
		b, err := startBaseline(c)
		if base = b; b != nil {
			defer b.stop()
		}
		if err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
	}
	memAfterBaseline := memAvailable()

	var sbs []*airlock.Sandbox
	defer func() {
		if c.keep {
			return
		}
		for _, s := range sbs {
			kctx, cancel := context.WithTimeout(ctx, time.Minute)
			_ = s.Kill(kctx)
			cancel()
		}
	}()
	fmt.Printf("host at the start: %s\n", hostContext())
	start := time.Now()
	var creates []time.Duration
	var failures []string
	var rttIdle []float64
	for i := 0; i < c.n; i++ {
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		s, err := cl.CreateSandbox(cctx, airlock.SandboxOptions{Template: c.template, Timeout: time.Hour, Metadata: map[string]string{"bench": "density"}})
		if err == nil {
			sbs = append(sbs, s)
			err = touch(cctx, cl, s, c.cell)
		}
		cancel()
		if err != nil {
			failures = append(failures, fmt.Sprintf("sandbox %d: %v", i, err))
			fmt.Fprintf(os.Stderr, "density: sandbox %d: %v\n", i, err)
			if len(failures) > c.maxFail {
				return fmt.Errorf("%d failures, the last: %w", len(failures), err)
			}
			continue
		}
		creates = append(creates, time.Since(t0))
		if len(sbs) == 1 && c.rtt > 0 {
			// The same figure on an otherwise idle daemon: one sandbox.
			rttIdle = roundTrips(ctx, cl, sbs[:1], c.rtt)
		}
		if (i+1)%10 == 0 {
			fmt.Fprintf(os.Stderr, "density: %d created, %.1f s, %s\n", i+1, time.Since(start).Seconds(), hostContext())
		}
	}
	createElapsed := time.Since(start)
	time.Sleep(c.settle)
	memAfter := memAvailable()

	ids := make([]string, len(sbs))
	for i, s := range sbs {
		ids[i] = s.ID
	}
	for r := 0; r < c.rounds; r++ {
		groups := []group{{name: c.template + " (airlock)", ids: ids}}
		if base != nil {
			groups = append(groups, group{name: "bare runsc, busybox sh", ids: base.ids})
		}
		d0 := daemonTicks(c.daemon)
		measure(groups, c.window)
		dt := daemonTicks(c.daemon) - d0
		fmt.Printf("\nround %d of %d, window %v, %s\n", r+1, c.rounds, c.window, time.Now().UTC().Format(time.RFC3339))
		tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "what\tn\tCPU % of a core p50\tp99\tmean\tPSS MiB p50\tp99")
		for _, g := range groups {
			p50, p99, mean := pcts(g.cpu)
			m50, m99, _ := pcts(g.pssMiB)
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\n", g.name, len(g.ids), p50, p99, mean, m50, m99)
		}
		if len(groups) == 2 {
			_, _, a := pcts(groups[0].cpu)
			_, _, b := pcts(groups[1].cpu)
			ratio := "— (the bare sandboxes used 0 ticks)"
			if b > 0 {
				ratio = fmt.Sprintf("%.1f×", a/b)
			}
			fmt.Fprintf(tw, "ratio airlock / bare (mean CPU)\t\t%s\t\t\t\t\n", ratio)
		}
		if c.daemon > 0 && len(ids) > 0 {
			pct := float64(dt) / clkTck / c.window.Seconds() * 100
			fmt.Fprintf(tw, "the daemon (pid %d) and its reaped children, per sandbox\t\t%.3f\t\t(%.2f in all)\t\t\n", c.daemon, pct/float64(len(ids)), pct)
		}
		tw.Flush()
	}
	if c.rtt > 0 && len(sbs) > 0 {
		busy := roundTrips(ctx, cl, spread(sbs, 10), c.rtt)
		a50, a99, _ := pcts(rttIdle)
		b50, b99, _ := pcts(busy)
		fmt.Printf("\ncommand round trip (`true`): %.1f ms p50, %.1f ms p99 with one sandbox; %.1f ms p50, %.1f ms p99 with %d alive (%d samples over 10 of them): %.2f× the p50\n",
			a50, a99, b50, b99, len(sbs), len(busy), b50/a50)
	}
	if c.extra > 0 {
		extraCreates(ctx, cl, c, len(sbs), creates)
	}
	if c.cell != "" {
		ok := 0
		var bad []string
		for i, s := range sbs {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			if err := check(cctx, cl, s); err != nil {
				bad = append(bad, fmt.Sprintf("sandbox %d (%s): %v", i, s.ID, err))
			} else {
				ok++
			}
			cancel()
		}
		fmt.Printf("a last cell (or command) on each: %d of %d answered correctly\n", ok, len(sbs))
		for _, b := range bad {
			fmt.Println("  ", b)
		}
	}
	fmt.Printf("failed creates: %d\n", len(failures))
	for _, f := range failures {
		fmt.Println("  ", f)
	}
	fmt.Printf("host at the end: %s\n", hostContext())
	p50, p99, _ := pcts(durMS(creates))
	fmt.Printf("\ncreates (create + first %s): %d in %.1f s = %.2f per second; p50 %.0f ms, p99 %.0f ms\n",
		map[bool]string{true: "cell", false: "`true`"}[hasInterpreter(c.template) && c.cell != ""],
		len(creates), createElapsed.Seconds(), float64(len(creates))/createElapsed.Seconds(), p50, p99)
	if memBefore > 0 && memAfter > 0 && c.n > 0 {
		fmt.Printf("host MemAvailable: %.0f MiB before, %.0f MiB after the baseline, %.0f MiB after %d sandboxes: %.1f MiB per sandbox (noisy on a shared host)\n",
			mib(memBefore), mib(memAfterBaseline), mib(memAfter), c.n, (mib(memAfterBaseline)-mib(memAfter))/float64(c.n))
	}
	return nil
}

// extraCreates times c.extra sequential creates, each up to its first cell's
// answer, while alive sandboxes live, and prints their rate and p50/p99
// next to the run's first c.extra creates (0 to c.extra-1 alive then). Each
// is killed once timed (the kill is not timed), so the set stays at alive.
func extraCreates(ctx context.Context, cl *airlock.Client, c config, alive int, first []time.Duration) {
	var ds []time.Duration
	var elapsed time.Duration // the creates' own time, kills left out
	fails := 0
	for i := 0; i < c.extra; i++ {
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		s, err := cl.CreateSandbox(cctx, airlock.SandboxOptions{Template: c.template, Timeout: 10 * time.Minute, Metadata: map[string]string{"bench": "density"}})
		if err == nil {
			err = touch(cctx, cl, s, c.cell)
		}
		cancel()
		d := time.Since(t0)
		if s != nil {
			// Killed at once, untimed: the set stays at alive (+1).
			kctx, cancel := context.WithTimeout(ctx, time.Minute)
			_ = s.Kill(kctx)
			cancel()
		}
		if err != nil {
			fails++
			fmt.Fprintf(os.Stderr, "density: extra create %d: %v\n", i, err)
			continue
		}
		ds = append(ds, d)
		elapsed += d
	}
	p50, p99, _ := pcts(durMS(ds))
	line := fmt.Sprintf("\nsequential creates (create + first cell) with %d alive: %d in %.1f s = %.2f per second; p50 %.0f ms, p99 %.0f ms; %d failed",
		alive, len(ds), elapsed.Seconds(), float64(len(ds))/elapsed.Seconds(), p50, p99, fails)
	if n := min(len(first), c.extra); n > 0 {
		b50, b99, _ := pcts(durMS(first[:n]))
		line += fmt.Sprintf("\n  the run's first %d creates (0 to %d alive): p50 %.0f ms, p99 %.0f ms; ratio of the p50s %.2f×", n, n-1, b50, b99, p50/b50)
	}
	fmt.Println(line)
}

func hasInterpreter(template string) bool { return strings.Contains(template, "interpreter") }

// touch runs the cell (interpreter templates) or `true`.
func touch(ctx context.Context, cl *airlock.Client, s *airlock.Sandbox, cell string) error {
	if cell == "" {
		return nil
	}
	if hasInterpreter(s.TemplateID) || hasInterpreter(s.Info.Alias) {
		ex, err := s.RunCode(ctx, cell)
		if err != nil {
			return err
		}
		if ex.Error != nil {
			return fmt.Errorf("cell error: %s", ex.Error.Error())
		}
		return nil
	}
	code, err := cl.RunShell(ctx, s.ID, s.AccessToken, "true")
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("true exited %d", code)
	}
	return nil
}

// check runs a cell that must print 42 (interpreter templates) or
// `echo 42`, and compares the output.
func check(ctx context.Context, cl *airlock.Client, s *airlock.Sandbox) error {
	if hasInterpreter(s.TemplateID) || hasInterpreter(s.Info.Alias) {
		ex, err := s.RunCode(ctx, "print(6 * 7)")
		if err != nil {
			return err
		}
		if ex.Error != nil {
			return fmt.Errorf("cell error: %s", ex.Error.Error())
		}
		if got := strings.Join(ex.Logs.Stdout, ""); got != "42\n" {
			return fmt.Errorf("cell printed %q, want \"42\\n\"", got)
		}
		return nil
	}
	code, err := cl.RunShell(ctx, s.ID, s.AccessToken, "test $((6 * 7)) = 42")
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("command exited %d", code)
	}
	return nil
}

// roundTrips times n runs of `true` spread over sbs, in milliseconds.
func roundTrips(ctx context.Context, cl *airlock.Client, sbs []*airlock.Sandbox, n int) []float64 {
	var out []float64
	for i := 0; i < n; i++ {
		s := sbs[i%len(sbs)]
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		t0 := time.Now()
		code, err := cl.RunShell(cctx, s.ID, s.AccessToken, "true")
		d := time.Since(t0)
		cancel()
		if err != nil || code != 0 {
			fmt.Fprintf(os.Stderr, "density: round trip on %s: exit %d, %v\n", s.ID, code, err)
			continue
		}
		out = append(out, float64(d.Microseconds())/1000)
	}
	return out
}

// spread is up to k of sbs, evenly spaced.
func spread(sbs []*airlock.Sandbox, k int) []*airlock.Sandbox {
	if len(sbs) <= k {
		return sbs
	}
	out := make([]*airlock.Sandbox, 0, k)
	for i := 0; i < k; i++ {
		out = append(out, sbs[i*len(sbs)/k])
	}
	return out
}

// findDaemon is the pid of the `airlock serve` process whose --listen
// address has the port of url (0 if none).
func findDaemon(url string) int {
	i := strings.LastIndexByte(url, ':')
	if i < 0 {
		return 0
	}
	port := strings.TrimRight(url[i+1:], "/")
	for _, p := range allProcs() {
		for j, a := range p.args {
			if (a == "--listen" || a == "-listen") && j+1 < len(p.args) && strings.HasSuffix(p.args[j+1], ":"+port) && slices.Contains(p.args, "serve") {
				return p.pid
			}
		}
	}
	return 0
}

// daemonTicks is utime+stime+cutime+cstime of pid: its own CPU and that of
// the children it reaped (fields 14-17 of /proc/<pid>/stat).
func daemonTicks(pid int) uint64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := statFields(b)
	if len(f) < 15 {
		return 0
	}
	var sum uint64
	for _, i := range []int{11, 12, 13, 14} {
		v, _ := strconv.ParseUint(f[i], 10, 64)
		sum += v
	}
	return sum
}

// hostContext says what else the host runs: its load average, and the
// runsc sandboxes and QEMU processes on it (this run's included).
func hostContext() string {
	la, _ := os.ReadFile("/proc/loadavg")
	sandboxes, qemus := 0, 0
	for _, p := range allProcs() {
		if len(p.args) == 0 {
			continue
		}
		switch b := filepath.Base(p.args[0]); {
		case b == "runsc-sandbox" || (strings.HasPrefix(b, "runsc") && slices.Contains(p.args, "boot")):
			sandboxes++
		case strings.HasPrefix(b, "qemu-system"):
			qemus++
		}
	}
	f := strings.Fields(string(la))
	if len(f) > 3 {
		f = f[:3]
	}
	return fmt.Sprintf("load average %s, %d runsc sandboxes and %d QEMU processes on the host", strings.Join(f, " "), sandboxes, qemus)
}

type group struct {
	name   string
	ids    []string
	cpu    []float64 // % of a core per sandbox
	pssMiB []float64
}

// measure fills cpu and pssMiB of each group over one window.
func measure(groups []group, window time.Duration) {
	trees := make([][][]int, len(groups))
	before := make([][]uint64, len(groups))
	procs := allProcs()
	for gi := range groups {
		for _, id := range groups[gi].ids {
			t := tree(procs, id)
			trees[gi] = append(trees[gi], t)
			before[gi] = append(before[gi], ticks(t))
		}
	}
	t0 := time.Now()
	time.Sleep(window)
	secs := time.Since(t0).Seconds()
	for gi := range groups {
		groups[gi].cpu, groups[gi].pssMiB = nil, nil
		for i, t := range trees[gi] {
			d := ticks(t) - before[gi][i]
			groups[gi].cpu = append(groups[gi].cpu, float64(d)/clkTck/secs*100)
			groups[gi].pssMiB = append(groups[gi].pssMiB, mib(pss(t)))
		}
	}
}

type procInfo struct {
	pid, ppid int
	args      []string
}

func allProcs() []procInfo {
	ents, _ := os.ReadDir("/proc")
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := statFields(st)
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out = append(out, procInfo{pid: pid, ppid: ppid, args: strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")})
	}
	return out
}

// tree is the runsc processes of container id (an argument that is id or
// ends in /id: the sandbox and the gofer), or the QEMU process of microVM
// id, and all their descendants.
func tree(procs []procInfo, id string) []int {
	in := map[int]bool{}
	for _, p := range procs {
		if len(p.args) == 0 {
			continue
		}
		if b := filepath.Base(p.args[0]); !strings.HasPrefix(b, "runsc") && !strings.HasPrefix(b, "qemu-system") {
			continue
		}
		for _, a := range p.args {
			// runsc: the id, a path ending in it or a flag's value;
			// QEMU (the microVM runtime): -name airlock-<id>.
			if a == id || strings.HasSuffix(a, "/"+id) || strings.HasSuffix(a, "="+id) || a == "airlock-"+id {
				in[p.pid] = true
				break
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for _, p := range procs {
			if !in[p.pid] && in[p.ppid] {
				in[p.pid], changed = true, true
			}
		}
	}
	out := make([]int, 0, len(in))
	for pid := range in {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out
}

// statFields are the fields of /proc/<pid>/stat after the command name:
// [0] is the state (field 3), [11] utime (14), [12] stime (15).
func statFields(b []byte) []string {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// ticks is utime+stime of every process in pids (all their threads).
func ticks(pids []int) uint64 {
	var sum uint64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := statFields(b)
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseUint(f[11], 10, 64)
		s, _ := strconv.ParseUint(f[12], 10, 64)
		sum += u + s
	}
	return sum
}

// pss is the proportional set size of pids in bytes.
func pss(pids []int) uint64 {
	var sum uint64
	for _, pid := range pids {
		f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				sum += kb << 10
			}
		}
		f.Close()
	}
	return sum
}

func memAvailable() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func durMS(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d.Microseconds()) / 1000
	}
	return out
}

// pcts are the median, 99th percentile and mean of v.
func pcts(v []float64) (p50, p99, mean float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	at := func(q float64) float64 { return s[min(len(s)-1, int(q*float64(len(s))))] }
	for _, x := range s {
		mean += x
	}
	return at(0.5), at(0.99), mean / float64(len(s))
}

// baseline is a set of bare runsc sandboxes of an idle busybox shell.
type baseline struct {
	c    config
	root string
	dir  string
	ids  []string
}

func startBaseline(c config) (*baseline, error) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return nil, fmt.Errorf("the baseline needs a static busybox: %w", err)
	}
	dir, err := os.MkdirTemp("", "density-baseline-")
	if err != nil {
		return nil, err
	}
	b := &baseline{c: c, dir: dir, root: filepath.Join(dir, "runsc")}
	bundle := filepath.Join(dir, "bundle")
	rootfs := filepath.Join(bundle, "rootfs")
	for _, d := range []string{filepath.Join(rootfs, "bin"), filepath.Join(rootfs, "proc"), filepath.Join(rootfs, "dev"), filepath.Join(rootfs, "sys"), b.root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return b, err
		}
	}
	if out, err := exec.Command("cp", bb, filepath.Join(rootfs, "bin", "busybox")).CombinedOutput(); err != nil {
		return b, fmt.Errorf("copying busybox: %w: %s", err, out)
	}
	for _, l := range []string{"sh", "sleep"} {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", l)); err != nil {
			return b, err
		}
	}
	spec := map[string]any{
		"ociVersion": "1.0.0",
		"process": map[string]any{
			"user": map[string]any{"uid": 0, "gid": 0},
			// An idle shell: waits in sleep, as an idle sandbox's agent waits.
			"args": []string{"/bin/sh", "-c", "while :; do sleep 100000; done"},
			"env":  []string{"PATH=/bin"},
			"cwd":  "/",
		},
		"root":     map[string]any{"path": "rootfs", "readonly": true},
		"hostname": "density",
		"mounts": []map[string]any{
			{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
		},
		"linux": map[string]any{"namespaces": []map[string]any{{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}}},
	}
	js, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), js, 0o644); err != nil {
		return b, err
	}
	for i := 0; i < c.baseline; i++ {
		id := fmt.Sprintf("density-bare-%d-%d", os.Getpid(), i)
		cmd := exec.Command(c.runsc, "--root", b.root, "--platform", c.platform, "--network", "none", "--ignore-cgroups",
			"run", "--detach", "--bundle", bundle, id)
		cmd.Stdin = nil
		out, err := os.Create(filepath.Join(dir, id+".log"))
		if err != nil {
			return b, err
		}
		cmd.Stdout, cmd.Stderr = out, out
		err = cmd.Run()
		out.Close()
		if err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, id+".log"))
			return b, fmt.Errorf("runsc run %s: %w: %s", id, err, log)
		}
		b.ids = append(b.ids, id)
	}
	return b, nil
}

func (b *baseline) stop() {
	for _, id := range b.ids {
		_ = exec.Command(b.c.runsc, "--root", b.root, "delete", "--force", id).Run()
	}
	_ = os.RemoveAll(b.dir)
}
