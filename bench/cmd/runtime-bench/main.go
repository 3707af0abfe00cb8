//go:build linux

// Command runtime-bench compares isolation runtimes side by side in one run:
// two daemons on this host (one --runtime gvisor, one --runtime microvm; see
// bench/runtime.sh) get the same workload, interleaved so that both see the
// same machine load:
//
//   - create → agent ready (POST /v2/sandboxes returns once the agent
//     answers /health), and the first command after it;
//   - command round trip (`true` through the process service);
//   - host memory per idle sandbox: RSS and PSS of every host process that
//     carries the sandbox (the QEMU VMM; runsc's sentry and gofer);
//   - pause, and resume → agent ready then a command (POST /resume returns
//     once the agent answers);
//   - fork ×1 and fork ×4 (POST /sandboxes/{id}/fork returns once every
//     child's agent answers) and host PSS per fork child after a command
//     in each (microVM children map the parent's frozen RAM copy-on-write).
//
// Nothing is asserted; it prints p50/p99 per runtime.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

type target struct {
	name string
	cl   *airlock.Client
	// samples
	create, first, rtt []time.Duration
	pause, resume      []time.Duration
	rss, pss           []uint64
	fork1, fork4       []time.Duration
	childPSS           []uint64
}

func main() {
	gv := flag.String("gvisor", "", "URL of a daemon running --runtime gvisor")
	mv := flag.String("microvm", "", "URL of a daemon running --runtime microvm")
	key := flag.String("api-key", os.Getenv("E2B_API_KEY"), "API key of both daemons")
	n := flag.Int("n", 10, "sandboxes per runtime")
	cmds := flag.Int("commands", 10, "command round trips per sandbox")
	settle := flag.Duration("settle", 3*time.Second, "idle time before reading a sandbox's memory")
	flag.Parse()
	if *gv == "" || *mv == "" || *key == "" {
		fmt.Fprintln(os.Stderr, "usage: runtime-bench -gvisor URL -microvm URL -api-key KEY [-n 10]")
		os.Exit(2)
	}
	targets := []*target{{name: "gvisor", cl: airlock.New(*gv, *key)}, {name: "microvm", cl: airlock.New(*mv, *key)}}
	ctx := context.Background()
	for i := 0; i < *n; i++ {
		order := targets
		if i%2 == 1 {
			order = []*target{targets[1], targets[0]}
		}
		for _, t := range order {
			if err := t.once(ctx, *cmds, *settle); err != nil {
				fmt.Fprintf(os.Stderr, "%s round %d: %v\n", t.name, i, err)
				os.Exit(1)
			}
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "runtime\tmeasurement\tp50\tp99\tn")
	for _, t := range targets {
		fmt.Fprintf(tw, "%s\tcreate → agent ready\t%s\t%s\t%d\n", t.name, ms(pct(t.create, 50)), ms(pct(t.create, 99)), len(t.create))
		fmt.Fprintf(tw, "%s\tfirst command after create\t%s\t%s\t%d\n", t.name, ms(pct(t.first, 50)), ms(pct(t.first, 99)), len(t.first))
		fmt.Fprintf(tw, "%s\tcommand round trip\t%s\t%s\t%d\n", t.name, ms(pct(t.rtt, 50)), ms(pct(t.rtt, 99)), len(t.rtt))
		fmt.Fprintf(tw, "%s\thost RSS per idle sandbox\t%s\t%s\t%d\n", t.name, mib(pctU(t.rss, 50)), mib(pctU(t.rss, 99)), len(t.rss))
		fmt.Fprintf(tw, "%s\thost PSS per idle sandbox\t%s\t%s\t%d\n", t.name, mib(pctU(t.pss, 50)), mib(pctU(t.pss, 99)), len(t.pss))
		fmt.Fprintf(tw, "%s\tpause\t%s\t%s\t%d\n", t.name, ms(pct(t.pause, 50)), ms(pct(t.pause, 99)), len(t.pause))
		fmt.Fprintf(tw, "%s\tresume → agent ready + command\t%s\t%s\t%d\n", t.name, ms(pct(t.resume, 50)), ms(pct(t.resume, 99)), len(t.resume))
		fmt.Fprintf(tw, "%s\tfork ×1 → child ready\t%s\t%s\t%d\n", t.name, ms(pct(t.fork1, 50)), ms(pct(t.fork1, 99)), len(t.fork1))
		fmt.Fprintf(tw, "%s\tfork ×4 → children ready\t%s\t%s\t%d\n", t.name, ms(pct(t.fork4, 50)), ms(pct(t.fork4, 99)), len(t.fork4))
		fmt.Fprintf(tw, "%s\thost PSS per fork child (×4)\t%s\t%s\t%d\n", t.name, mib(pctU(t.childPSS, 50)), mib(pctU(t.childPSS, 99)), len(t.childPSS))
	}
	tw.Flush()
}

func (t *target) once(ctx context.Context, cmds int, settle time.Duration) error {
	t0 := time.Now()
	sb, err := t.cl.CreateSandbox(ctx, airlock.SandboxOptions{Template: "base", Timeout: 300 * time.Second})
	if err != nil {
		return err
	}
	defer func() { _ = t.cl.KillSandbox(context.WithoutCancel(ctx), sb.ID) }()
	t.create = append(t.create, time.Since(t0))
	proc := t.cl.Process(sb.ID, sb.AccessToken)
	t1 := time.Now()
	if err := runTrue(ctx, proc); err != nil {
		return err
	}
	t.first = append(t.first, time.Since(t1))
	for i := 0; i < cmds; i++ {
		t1 := time.Now()
		if err := runTrue(ctx, proc); err != nil {
			return err
		}
		t.rtt = append(t.rtt, time.Since(t1))
	}
	time.Sleep(settle)
	rss, pss := hostMemory(sb.ID)
	if rss == 0 {
		return fmt.Errorf("no host process found for sandbox %s", sb.ID)
	}
	t.rss, t.pss = append(t.rss, rss), append(t.pss, pss)

	t1 = time.Now()
	if err := t.cl.PauseSandbox(ctx, sb.ID); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	t.pause = append(t.pause, time.Since(t1))
	t1 = time.Now()
	if _, err := t.cl.ResumeSandbox(ctx, sb.ID, 300); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	if err := runTrue(ctx, proc); err != nil {
		return fmt.Errorf("command after resume: %w", err)
	}
	t.resume = append(t.resume, time.Since(t1))
	for _, count := range []int{1, 4} {
		if err := t.fork(ctx, sb.ID, count, settle); err != nil {
			return fmt.Errorf("fork ×%d: %w", count, err)
		}
	}
	return nil
}

// fork forks the sandbox id count times, runs a command in each child and
// (for count > 1) reads each child's host memory, then kills the children.
func (t *target) fork(ctx context.Context, id string, count int, settle time.Duration) error {
	t0 := time.Now()
	kids, err := t.cl.ForkSandbox(ctx, id, count, 300)
	took := time.Since(t0)
	var ids []string
	for _, k := range kids {
		if k.Sandbox != nil {
			ids = append(ids, k.Sandbox.SandboxID)
		}
	}
	defer func() {
		for _, kid := range ids {
			_ = t.cl.KillSandbox(context.WithoutCancel(ctx), kid)
		}
	}()
	if err != nil {
		return err
	}
	for _, k := range kids {
		if k.Sandbox == nil {
			msg := "no sandbox"
			if k.Error != nil {
				msg = k.Error.Message
			}
			return fmt.Errorf("child failed: %s", msg)
		}
		if err := runTrue(ctx, t.cl.Process(k.Sandbox.SandboxID, k.Sandbox.EnvdAccessToken)); err != nil {
			return fmt.Errorf("command in child: %w", err)
		}
	}
	if count == 1 {
		t.fork1 = append(t.fork1, took)
		return nil
	}
	t.fork4 = append(t.fork4, took)
	time.Sleep(settle)
	for _, kid := range ids {
		if _, pss := hostMemory(kid); pss > 0 {
			t.childPSS = append(t.childPSS, pss)
		}
	}
	return nil
}

func runTrue(ctx context.Context, proc processpbconnect.ProcessClient) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stream, err := proc.Start(ctx, connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/true"},
	}))
	if err != nil {
		return fmt.Errorf("starting command: %w", err)
	}
	defer stream.Close()
	_, err = guest.Receive(stream, guest.Events{})
	if errors.Is(err, guest.ErrNoEnd) {
		return errors.New("no end event")
	}
	return err
}

// hostMemory sums RSS and PSS (bytes) of the host processes whose command
// line names the sandbox: QEMU's "-name airlock-<id>", runsc's sandbox and
// gofer processes.
func hostMemory(id string) (rss, pss uint64) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	self := strconv.Itoa(os.Getpid())
	for _, d := range dirs {
		if filepath.Base(d) == self {
			continue
		}
		b, err := os.ReadFile(d + "/cmdline")
		if err != nil || !strings.Contains(string(b), id) {
			continue
		}
		r, p := smapsRollup(d + "/smaps_rollup")
		rss += r
		pss += p
	}
	return rss, pss
}

func smapsRollup(path string) (rss, pss uint64) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		v, _ := strconv.ParseUint(fs[1], 10, 64)
		switch fs[0] {
		case "Rss:":
			rss = v << 10
		case "Pss:":
			pss = v << 10
		}
	}
	return rss, pss
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[max((p*len(s)+99)/100, 1)-1]
}

func pctU(vs []uint64, p int) uint64 {
	if len(vs) == 0 {
		return 0
	}
	s := append([]uint64(nil), vs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[max((p*len(s)+99)/100, 1)-1]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
func mib(b uint64) string       { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
