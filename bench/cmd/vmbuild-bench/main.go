// Command vmbuild-bench compares a small Dockerfile build (FROM base, ENV,
// WORKDIR, one RUN that creates, changes and deletes files; --no-cache so
// every step runs) on two daemons of the same host, one --runtime gvisor
// and one --runtime microvm, interleaved in one run. As a baseline from the
// same run it times, on each daemon, what a RUN step costs without reading
// its layer: create a base sandbox, run the same command, kill it.
//
// Usage: go run ./bench/cmd/vmbuild-bench -gvisor URL -microvm URL -api-key KEY [-n 5]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

const runCmd = `echo built > made.txt && ln -s made.txt link.txt && echo extra >> /etc/motd && rm -f /etc/issue.net && rm -rf /usr/share/doc/debconf`

const dockerfile = "FROM base\nENV BENCH=1\nWORKDIR /opt/bench\nRUN " + runCmd + "\n"

func main() {
	var (
		gv  = flag.String("gvisor", "", "URL of a daemon running --runtime gvisor")
		vm  = flag.String("microvm", "", "URL of a daemon running --runtime microvm")
		key = flag.String("api-key", os.Getenv("E2B_API_KEY"), "API key (both daemons)")
		n   = flag.Int("n", 5, "builds and baselines per daemon")
	)
	flag.Parse()
	if *gv == "" || *vm == "" {
		fmt.Fprintln(os.Stderr, "vmbuild-bench: -gvisor and -microvm are required")
		os.Exit(2)
	}
	if err := run(*gv, *vm, *key, *n); err != nil {
		fmt.Fprintln(os.Stderr, "vmbuild-bench:", err)
		os.Exit(1)
	}
}

type daemon struct {
	name            string
	c               *airlock.Client
	builds, baseRun []time.Duration
}

func run(gvURL, vmURL, key string, n int) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "vmbuild-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return err
	}
	name := fmt.Sprintf("vmbench-%d", time.Now().UnixNano())
	ds := []*daemon{{name: "gVisor", c: airlock.New(gvURL, key)}, {name: "microVM", c: airlock.New(vmURL, key)}}
	for _, d := range ds {
		defer func() { _ = d.c.RemoveTemplate(ctx, name) }()
	}
	for i := range n {
		for _, d := range ds {
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(airlock.WriteContextTar(pw, dir, "", "")) }()
			start := time.Now()
			if _, err := d.c.BuildDockerfile(ctx, name, pr, airlock.DockerfileBuild{NoCache: true}, nil); err != nil {
				return fmt.Errorf("%s build %d: %w", d.name, i, err)
			}
			d.builds = append(d.builds, time.Since(start))
			b, err := baseline(ctx, d.c)
			if err != nil {
				return fmt.Errorf("%s baseline %d: %w", d.name, i, err)
			}
			d.baseRun = append(d.baseRun, b)
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "runtime\tmeasurement\tn\tp50\tp99")
	for _, d := range ds {
		fmt.Fprintf(tw, "%s\tsmall build (--no-cache: WORKDIR layer + RUN layer)\t%d\t%s\t%s\n", d.name, len(d.builds), pct(d.builds, 50), pct(d.builds, 99))
		fmt.Fprintf(tw, "%s\tbaseline: create + the RUN command + kill\t%d\t%s\t%s\n", d.name, len(d.baseRun), pct(d.baseRun, 50), pct(d.baseRun, 99))
	}
	return tw.Flush()
}

// baseline runs the step's command in a fresh base sandbox, without layer
// capture.
func baseline(ctx context.Context, c *airlock.Client) (time.Duration, error) {
	start := time.Now()
	sb, err := c.CreateSandbox(ctx, airlock.SandboxOptions{Template: "base", Timeout: 300 * time.Second})
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.KillSandbox(ctx, sb.ID) }()
	code, err := c.RunShell(ctx, sb.ID, sb.AccessToken, "mkdir -p /opt/bench && cd /opt/bench && "+runCmd)
	if err != nil {
		return 0, err
	}
	if code != 0 {
		return 0, fmt.Errorf("command exited %d", code)
	}
	if err := c.KillSandbox(ctx, sb.ID); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))].Round(time.Millisecond)
}
