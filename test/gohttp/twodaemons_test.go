//go:build e2e

package gohttp

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSecondDaemonRefused starts a second `airlock serve` beside the suite's
// daemon: with the same --net-prefix and --subnet (its own data dir and
// port), and with the same data dir (another prefix). Each must exit at once
// with a message naming the running daemon's pid and flags, and the running
// daemon's sandbox must keep working: before the locks, the second daemon
// rebuilt the shared nftables table and removed the first's veths as stale.
func TestSecondDaemonRefused(t *testing.T) {
	e := loadEnv(t)
	dataDir := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	if dataDir == "" {
		t.Fatal("AIRLOCK_E2E_DATA_DIR must be set (run scripts/test.sh)")
	}
	subnet := os.Getenv("AIRLOCK_E2E_SUBNET")
	if subnet == "" {
		subnet = "10.79.0.0/16"
	}
	sb := e.createV1(t, 300, nil)
	if r := e.run(t, sb, "user", "echo before", time.Minute); strings.TrimSpace(r.stdout) != "before" {
		t.Fatalf("before: %+v", r)
	}
	first := strconv.Itoa(daemonPID(t))

	cases := []struct {
		name, dataDir, prefix, want string
	}{
		{"same net prefix", t.TempDir(), netPrefix(), "--net-prefix " + netPrefix()},
		{"same data dir", dataDir, "zz" + netPrefix(), "the data directory " + filepath.Clean(dataDir)},
	}
	for _, c := range cases {
		t0 := time.Now()
		d := startSecondDaemon(t, secondDaemonOpts{Name: "refused", DataDir: c.dataDir, Prefix: c.prefix, Subnet: subnet,
			APIKey: "e2b_" + strings.Repeat("0badd0", 6) + "0bad", Args: []string{"--templates", "base"}})
		exited := d.exited(60 * time.Second)
		msg := d.log()
		t.Logf("%s: exit %v after %s: %s", c.name, d.err, time.Since(t0).Round(time.Millisecond), tail(msg, 5))
		if !exited || d.err == nil {
			t.Errorf("%s: the second daemon did not refuse to start (exited %v, err %v)", c.name, exited, d.err)
			continue
		}
		for _, want := range []string{c.want, "pid " + first, "in use by another airlock daemon", "--subnet " + subnet} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: output lacks %q:\n%s", c.name, want, tail(msg, 10))
			}
		}
	}

	// The first daemon and its sandbox are untouched.
	if !healthy(e.apiURL) {
		t.Fatal("the running daemon is not healthy after the refused starts")
	}
	if r := e.run(t, sb, "user", "echo after", time.Minute); strings.TrimSpace(r.stdout) != "after" {
		t.Fatalf("the running daemon's sandbox after the refused starts: %+v", r)
	}
	other := e.createV1(t, 60, nil)
	if r := e.run(t, other, "user", "echo new", time.Minute); strings.TrimSpace(r.stdout) != "new" {
		t.Fatalf("a new sandbox after the refused starts: %+v", r)
	}
}
