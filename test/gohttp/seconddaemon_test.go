//go:build e2e

package gohttp

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// secondDaemonOpts say how startSecondDaemon runs a private `airlock serve`
// beside the suite's daemon (AIRLOCK_E2E_SERVE_CMD's binary).
type secondDaemonOpts struct {
	// Name labels its log and, without DataDir, names its data dir: the
	// suite's data dir + "." + Name, emptied first and removed at the end.
	Name string
	// DataDir, when set, is used as it is (neither emptied nor removed).
	DataDir string
	// Templates are hard-linked from the suite's data dir (newest build of
	// each name).
	Templates []string
	// Prepare runs on the data dir before the daemon starts (a mount); its
	// t.Cleanup calls run after the daemon has stopped.
	Prepare func(dataDir string)
	// Letter replaces diskFullNet's "x" in the net prefix, and Below is
	// the /24 below the top of the suite's pool (the disk-full daemon: "x",
	// 0; the warm-pool one "w", 1; proxy down "y", 1 too; first run "b",
	// 2; .251, 3, is scripts/test-image.sh's).
	// Prefix and Subnet, when set, are used instead.
	Letter         string
	Below          int
	Prefix, Subnet string
	// APIKey is its --api-key (default: one of its own).
	APIKey string
	// Args are more serve flags.
	Args []string
	// Healthy: wait up to this long for GET /health (0: return at once).
	Healthy time.Duration
	// LogTail is how many lines of its log a failed test shows (default 40).
	LogTail int
}

// secondDaemon is a running (or exited) private daemon.
type secondDaemon struct {
	env
	dataDir, netPrefix, subnet, listen, logPath string
	cmd                                         *exec.Cmd
	// done is closed when the process has exited, with its Wait error in
	// err.
	done chan struct{}
	err  error
}

// log is its output so far.
func (d *secondDaemon) log() string { b, _ := os.ReadFile(d.logPath); return string(b) }

// exited waits up to timeout for the process to exit; false if it still
// runs.
func (d *secondDaemon) exited(timeout time.Duration) bool {
	select {
	case <-d.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// startSecondDaemon starts a private daemon as opts say. At the test's end
// it is stopped (SIGTERM, SIGKILL after 60 s), its log shown when the test
// failed, and its data dir removed (unless opts.DataDir).
func startSecondDaemon(t *testing.T, opts secondDaemonOpts) *secondDaemon {
	t.Helper()
	base := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	serve := strings.Fields(os.Getenv("AIRLOCK_E2E_SERVE_CMD"))
	if base == "" || len(serve) == 0 {
		t.Fatal("AIRLOCK_E2E_DATA_DIR and AIRLOCK_E2E_SERVE_CMD must be set (run scripts/test.sh)")
	}
	d := &secondDaemon{dataDir: opts.DataDir, netPrefix: opts.Prefix, subnet: opts.Subnet, done: make(chan struct{})}
	if d.netPrefix == "" || d.subnet == "" {
		prefix, subnet := diskFullNet(t)
		a := netip.MustParsePrefix(subnet).Addr().As4()
		if d.netPrefix == "" {
			d.netPrefix = opts.Letter + strings.TrimPrefix(prefix, "x")
		}
		if d.subnet == "" {
			d.subnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{a[0], a[1], a[2] - byte(opts.Below), 0}), 24).String()
		}
	}
	if d.dataDir == "" {
		d.dataDir = filepath.Clean(base) + "." + opts.Name
		if err := os.RemoveAll(d.dataDir); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d.dataDir) })
	}
	if err := os.MkdirAll(filepath.Join(d.dataDir, "templates"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range opts.Templates {
		hash := templateHash(t, base, name)
		if out, err := exec.Command("cp", "-al", filepath.Join(base, "templates", hash), filepath.Join(d.dataDir, "templates", hash)).CombinedOutput(); err != nil {
			t.Fatalf("linking template %s: %v: %s", name, err, out)
		}
	}
	if opts.Prepare != nil {
		opts.Prepare(d.dataDir)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.listen = ln.Addr().String()
	ln.Close()
	d.apiKey = opts.APIKey
	if d.apiKey == "" {
		d.apiKey = "e2b_" + strings.Repeat("5ec0", 10)
	}
	d.apiURL, d.sandboxURL = "http://"+d.listen, "http://"+d.listen
	// The log lives beside the data dir, not in it (a given data dir may be
	// the suite's own).
	logf, err := os.CreateTemp("", "airlock-"+opts.Name+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	d.logPath = logf.Name()
	args := append([]string{"serve", "--listen", d.listen, "--data-dir", d.dataDir, "--api-key", d.apiKey,
		"--net-prefix", d.netPrefix, "--subnet", d.subnet}, opts.Args...)
	d.cmd = exec.Command(serve[0], args...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	n := opts.LogTail
	if n == 0 {
		n = 40
	}
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		if !d.exited(60 * time.Second) {
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if opts.Prefix == "" {
			// A stopped daemon may keep its table for its next start
			// (there is none); never the suite's (opts.Prefix).
			_ = exec.Command("nft", "delete", "table", "inet", d.netPrefix).Run()
		}
		logf.Close()
		if t.Failed() {
			t.Logf("%s daemon log (tail):\n%s", opts.Name, tail(d.log(), n))
		}
		_ = os.Remove(d.logPath)
	})
	if opts.Healthy > 0 && !waitFor(opts.Healthy, 250*time.Millisecond, func() bool { return healthy(d.apiURL) }) {
		t.Fatalf("%s daemon on %s not healthy within %s", opts.Name, d.listen, opts.Healthy)
	}
	return d
}
