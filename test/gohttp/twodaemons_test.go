//go:build e2e

package gohttp

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
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
	serve := strings.Fields(os.Getenv("AIRLOCK_E2E_SERVE_CMD"))
	dataDir := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	if len(serve) == 0 || dataDir == "" {
		t.Fatal("AIRLOCK_E2E_SERVE_CMD and AIRLOCK_E2E_DATA_DIR must be set (run scripts/test.sh)")
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
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listen := ln.Addr().String()
		ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, serve[0], "serve", "--listen", listen, "--data-dir", c.dataDir,
			"--api-key", "e2b_"+strings.Repeat("0badd0", 6)+"0bad", "--net-prefix", c.prefix, "--subnet", subnet, "--templates", "base")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		err = cmd.Run()
		timedOut := ctx.Err() != nil
		cancel()
		msg := out.String()
		t.Logf("%s: exit %v after %s: %s", c.name, err, time.Since(t0).Round(time.Millisecond), tail(msg, 5))
		if err == nil || timedOut {
			t.Errorf("%s: the second daemon did not refuse to start (err %v)", c.name, err)
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
