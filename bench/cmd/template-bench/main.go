// Command template-bench measures Dockerfile template builds on a running
// Airlock daemon: a cold build (--no-cache: every step runs again), a fully
// cached rebuild, and as a baseline from the same run the same package
// install run directly in a sandbox (create, command, kill) without layer
// capture. With -data-dir (the daemon's, same host) it also reports the disk
// space of the template's layers (hard links counted once).
//
// Usage: export the daemon's E2B_API_URL and E2B_API_KEY, then
// go run ./bench/cmd/template-bench [-cold 3] [-cached 10] [-data-dir DIR]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

const install = "apt-get update -qq && apt-get install -y -qq --no-install-recommends cowsay >/dev/null && rm -rf /var/lib/apt/lists/*"

const dockerfile = `FROM base
ENV APP_MODE=bench
RUN ` + install + `
COPY --chown=user:user site/ /home/user/site/
USER user
WORKDIR /home/user/site
RUN echo built > build-id.txt
CMD ["python3", "-m", "http.server", "8000"]
`

func main() {
	var (
		url     = flag.String("url", firstEnv("AIRLOCK_URL", "E2B_API_URL"), "daemon URL")
		key     = flag.String("api-key", firstEnv("AIRLOCK_API_KEY", "E2B_API_KEY"), "API key")
		cold    = flag.Int("cold", 3, "cold builds (--no-cache)")
		cached  = flag.Int("cached", 10, "cached rebuilds")
		dataDir = flag.String("data-dir", "", "daemon data dir, to measure layer disk usage (optional)")
	)
	flag.Parse()
	if err := run(*url, *key, *cold, *cached, *dataDir); err != nil {
		fmt.Fprintln(os.Stderr, "template-bench:", err)
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

func run(url, key string, nCold, nCached int, dataDir string) error {
	ctx := context.Background()
	c := airlock.New(url, key)
	dir, err := os.MkdirTemp("", "template-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Join(dir, "site"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "site", "index.html"), []byte("<h1>bench</h1>\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return err
	}
	name := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	build := func(noCache bool) (time.Duration, *airlock.Template, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(airlock.WriteContextTar(pw, dir, "", "")) }()
		start := time.Now()
		t, err := c.BuildDockerfile(ctx, name, pr, airlock.DockerfileBuild{NoCache: noCache,
			ReadyCmd: "curl -sf http://127.0.0.1:8000/ >/dev/null"}, nil)
		return time.Since(start), t, err
	}
	defer func() { _ = c.RemoveTemplate(ctx, name) }()

	var colds, cacheds, base []time.Duration
	for range nCold {
		d, _, err := build(true)
		if err != nil {
			return fmt.Errorf("cold build: %w", err)
		}
		colds = append(colds, d)
	}
	var tpl *airlock.Template
	for range nCached {
		d, t, err := build(false)
		if err != nil {
			return fmt.Errorf("cached build: %w", err)
		}
		cacheds, tpl = append(cacheds, d), t
	}
	for range nCold {
		d, err := baseline(ctx, c)
		if err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
		base = append(base, d)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "measurement\tn\tp50\tp99\tnote")
	row := func(what string, ds []time.Duration, note string) {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", what, len(ds), pct(ds, 50).Round(time.Millisecond), pct(ds, 99).Round(time.Millisecond), note)
	}
	row("cold build (--no-cache, 3 layer steps)", colds, "")
	row("cached rebuild (every step CACHED)", cacheds, "")
	row("baseline: same apt install in a sandbox", base, "create + command + kill, no layer capture")
	if dataDir != "" && tpl != nil {
		info, err := c.TemplateInfo(ctx, name)
		if err == nil && info.Config != nil {
			fmt.Fprintf(tw, "template size (full tree)\t\t%s\t\t\n", mib(tpl.SizeBytes))
			fmt.Fprintf(tw, "layers on disk beyond FROM (du, hard links once)\t\t%s\t\t%d layers\n", layerDisk(dataDir, info.Config.Layers), len(info.Config.Layers)-1)
		}
	}
	return tw.Flush()
}

// baseline runs the install in a fresh base sandbox.
func baseline(ctx context.Context, c *airlock.Client) (time.Duration, error) {
	start := time.Now()
	sb, err := c.CreateSandbox(ctx, airlock.SandboxOptions{Template: "base", Timeout: 300 * time.Second})
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.KillSandbox(ctx, sb.ID) }()
	code, err := c.RunShell(ctx, sb.ID, sb.AccessToken, install)
	if err != nil {
		return 0, err
	}
	if code != 0 {
		return 0, fmt.Errorf("install exited %d", code)
	}
	_ = c.KillSandbox(ctx, sb.ID)
	return time.Since(start), nil
}

func layerDisk(dataDir string, layers []string) string {
	if len(layers) < 2 {
		return "0"
	}
	args := []string{"-sc", "--block-size=1M"}
	for _, l := range layers {
		args = append(args, filepath.Join(dataDir, "templates", l, "rootfs"))
	}
	out, err := exec.Command("du", args...).Output()
	if err != nil {
		return "du: " + err.Error()
	}
	// Lines: one per layer in order; the first is the FROM template.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var sum int
	for _, l := range lines[1 : len(lines)-1] {
		var n int
		fmt.Sscanf(l, "%d", &n)
		sum += n
	}
	return fmt.Sprintf("%d MiB", sum)
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}
