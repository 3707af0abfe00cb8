//go:build e2e

package gohttp

// A node whose egress proxy cannot start (issue 29, "bad input"): a second
// daemon whose --egress-proxy-upstream-ca names no file. It keeps running
// (sandboxes without rules work), and a create with network.rules, or a
// PUT network adding them, fails clearly (503 naming the proxy) before
// anything is set up: never a sandbox whose ruled traffic goes out with
// nothing intercepting it.

import (
	"net"
	"net/http"
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
	// daemon's at the top of the suite's pool.
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
	if err := os.MkdirAll(filepath.Join(dataDir, "templates"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dataDir) })
	hash := templateHash(t, base, "base")
	if out, err := exec.Command("cp", "-al", filepath.Join(base, "templates", hash), filepath.Join(dataDir, "templates", hash)).CombinedOutput(); err != nil {
		t.Fatalf("linking the base template: %v: %s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	e := env{apiURL: "http://" + listen, sandboxURL: "http://" + listen, apiKey: "e2b_" + strings.Repeat("9d0c4a11", 5)}
	logPath := filepath.Join(dataDir, "daemon.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	missingCA := filepath.Join(dataDir, "no-such-upstream-ca.pem")
	cmd := exec.Command(serve[0], "serve", "--listen", listen, "--data-dir", dataDir, "--api-key", e.apiKey,
		"--net-prefix", prefix, "--subnet", subnet, "--templates", "base",
		"--dns-upstream", "192.0.2.53", "--egress-proxy-upstream-ca", missingCA)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		// A stopped daemon keeps its table for the next start; there is none.
		_ = exec.Command("nft", "delete", "table", "inet", prefix).Run()
		logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("daemon log (tail):\n%s", tail(string(b), 40))
			}
		}
	})
	if !waitFor(3*time.Minute, 250*time.Millisecond, func() bool { return healthy(e.apiURL) }) {
		t.Fatalf("daemon on %s not healthy", listen)
	}
	if b, _ := os.ReadFile(logPath); !strings.Contains(string(b), "egress proxy not started") {
		t.Fatalf("the daemon log does not say the egress proxy did not start:\n%s", tail(string(b), 20))
	}

	tag := uniqueTag(t)
	secretName := "e2e-proxydown-" + tag
	if r := e.api(t, http.MethodPost, "/secrets", map[string]any{"name": secretName, "value": "proxydown-" + tag + "-VALUE"}); r.status != http.StatusCreated {
		t.Fatalf("POST /secrets = %d %s", r.status, r.body)
	}
	rules := map[string]any{"secrets-a.test": []map[string]any{{"transform": map[string]any{"headers": map[string]string{"Authorization": "Bearer ${e2b.secrets." + secretName + "}"}}}}}
	refused := func(what string, r apiResp) {
		t.Helper()
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "egress proxy is not running") || strings.Contains(string(r.body), missingCA) {
			t.Errorf("%s = %d %s; want 503 naming the egress proxy (and not the operator's file)", what, r.status, r.body)
		}
	}
	count := func() int {
		var list []sandboxInfo
		e.api(t, http.MethodGet, "/sandboxes", nil).json(t, &list)
		return len(list)
	}

	r := e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 300, "network": map[string]any{"rules": rules}})
	refused("POST /sandboxes with rules", r)
	if r.status == http.StatusCreated {
		var s sandboxInfo
		r.json(t, &s)
		t.Cleanup(func() { e.kill(s.SandboxID) })
	}
	if n := count(); n != 0 {
		t.Errorf("after the refused create the daemon lists %d sandboxes", n)
	}

	// The node works otherwise: a sandbox without rules, whose network
	// update adding rules is refused the same way and changes nothing.
	s := e.createV1(t, 300, nil)
	refused("PUT network with rules", e.api(t, http.MethodPut, "/sandboxes/"+s.SandboxID+"/network", map[string]any{"rules": rules}))
	var got map[string]any
	e.api(t, http.MethodGet, "/sandboxes/"+s.SandboxID, nil).json(t, &got)
	if nw, _ := got["network"].(map[string]any); nw != nil && nw["rules"] != nil {
		t.Errorf("rules after the refused update: %v", nw["rules"])
	}
	if r := e.run(t, s, "user", "echo ok", time.Minute); strings.TrimSpace(r.stdout) != "ok" {
		t.Errorf("the sandbox without rules: %+v", r)
	}
}
