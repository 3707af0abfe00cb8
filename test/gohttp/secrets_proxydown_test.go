//go:build e2e

package gohttp

// A node given an --egress-proxy-upstream-ca it cannot use (issue 29, "bad
// input"): a file that is missing, or that holds no PEM certificate. The
// daemon refuses to start, naming the flag and the file (it used to start
// with its egress proxy down, refusing every create with network.rules
// with 503: an operator's mistake found only by the first user of rules).
// The 503 of a node whose proxy did not start for another reason is
// internal/sandbox's TestNetworkRulesRefusedWithoutEgressProxy.

import (
	"bytes"
	"errors"
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

func TestSecretsProxyCannotStart(t *testing.T) {
	base := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	serve := strings.Fields(os.Getenv("AIRLOCK_E2E_SERVE_CMD"))
	if base == "" || len(serve) == 0 {
		t.Fatal("AIRLOCK_E2E_DATA_DIR and AIRLOCK_E2E_SERVE_CMD must be set (run scripts/test.sh)")
	}
	// Its own prefix ("y" + the suite's) and the /24 below the disk-full
	// daemon's at the top of the suite's pool, should it start after all.
	prefix := "y" + netPrefix()
	subnet := os.Getenv("AIRLOCK_E2E_SUBNET")
	if subnet == "" {
		subnet = "10.79.0.0/16"
	}
	p, err := netip.ParsePrefix(subnet)
	if err != nil || !p.Addr().Is4() || p.Bits() > 16 || len(prefix) > 10 {
		t.Fatalf("AIRLOCK_E2E_SUBNET %q / prefix %q: want an IPv4 /16 or larger and a short prefix", subnet, prefix)
	}
	a := p.Masked().Addr().As4()
	subnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{a[0], a[1], 253, 0}), 24).String()

	dataDir := filepath.Clean(base) + ".proxydown"
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dataDir) })
	notPEM := filepath.Join(dataDir, "not-a-ca.pem")
	if err := os.WriteFile(notPEM, []byte("-----BEGIN NOTHING-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file, why string }{
		{"missing file", filepath.Join(dataDir, "no-such-upstream-ca.pem"), "no such file or directory"},
		{"no PEM certificate", notPEM, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			listen := ln.Addr().String()
			ln.Close()
			var out bytes.Buffer
			cmd := exec.Command(serve[0], "serve", "--listen", listen, "--data-dir", dataDir, "--api-key", "e2b_"+strings.Repeat("9d0c4a11", 5),
				"--net-prefix", prefix, "--subnet", subnet, "--templates", "base",
				"--dns-upstream", "192.0.2.53", "--egress-proxy-upstream-ca", tc.file)
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-done:
				case <-time.After(60 * time.Second):
					_ = cmd.Process.Kill()
					<-done
				}
				_ = exec.Command("nft", "delete", "table", "inet", prefix).Run()
				t.Fatalf("the daemon still runs 60 s after start with a bad --egress-proxy-upstream-ca (healthy: %v); output:\n%s", healthy("http://"+listen), tail(out.String(), 20))
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("the daemon exited with %v; want a failure", err)
			}
			for _, want := range []string{"--egress-proxy-upstream-ca", tc.file, tc.why} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the daemon's output does not say %q:\n%s", want, tail(out.String(), 20))
				}
			}
		})
	}
}
