//go:build e2e

package gohttp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServesFirstTemplateWhileOthersBuild starts a daemon whose data dir
// holds code-interpreter-v1 but not base (as a fresh host whose smaller
// template is ready first, the other way round): it serves at once, GET
// /health names base as still building, and a create of base waits for the
// build (the wait and the build's progress in the log) instead of failing.
func TestServesFirstTemplateWhileOthersBuild(t *testing.T) {
	base := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	serve := strings.Fields(os.Getenv("AIRLOCK_E2E_SERVE_CMD"))
	if base == "" || len(serve) == 0 {
		t.Fatal("AIRLOCK_E2E_DATA_DIR and AIRLOCK_E2E_SERVE_CMD must be set (run scripts/test.sh)")
	}
	dataDir := filepath.Clean(base) + ".firstrun"
	_ = os.RemoveAll(dataDir)
	if err := os.MkdirAll(filepath.Join(dataDir, "templates"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dataDir) })
	hash := templateHash(t, base, "code-interpreter-v1")
	if out, err := exec.Command("cp", "-al", filepath.Join(base, "templates", hash), filepath.Join(dataDir, "templates", hash)).CombinedOutput(); err != nil {
		t.Fatalf("linking code-interpreter-v1: %v: %s", err, out)
	}
	// Own network: prefix "b" + the suite's, the third /24 from the top of
	// the suite's pool (the disk-full daemon has the top one, the warm-pool
	// daemon the next).
	prefix, subnet := diskFullNet(t)
	prefix = "b" + strings.TrimPrefix(prefix, "x")
	a := netip.MustParsePrefix(subnet).Addr().As4()
	subnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{a[0], a[1], a[2] - 2, 0}), 24).String()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	apiURL, apiKey := "http://"+listen, "e2b_"+strings.Repeat("f1r5", 10)
	logPath := filepath.Join(dataDir, "daemon.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(serve[0], "serve", "--listen", listen, "--data-dir", dataDir, "--api-key", apiKey,
		"--net-prefix", prefix, "--subnet", subnet, "--kill-on-exit", "--boot-snapshots=false")
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
		logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("daemon log (tail):\n%s", tail(string(b), 60))
			}
		}
	})
	logText := func() string { b, _ := os.ReadFile(logPath); return string(b) }

	type health struct {
		Status   string   `json:"status"`
		Building []string `json:"building"`
	}
	getHealth := func() (int, health) {
		var h health
		resp, err := http.Get(apiURL + "/health")
		if err != nil {
			return 0, h
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &h)
		return resp.StatusCode, h
	}
	// Ready with code-interpreter-v1 while base builds (a base build takes
	// most of a minute here; the daemon starts in seconds).
	var h health
	if !waitFor(45*time.Second, 200*time.Millisecond, func() bool {
		var code int
		code, h = getHealth()
		return code == http.StatusOK
	}) {
		t.Fatalf("/health not 200 within 45 s while base builds (a daemon that waits for every template)")
	}
	if !slices.Equal(h.Building, []string{"base"}) {
		t.Fatalf("/health = %+v, want status ok with building [base]", h)
	}

	// A create of base waits for its build and succeeds.
	body, _ := json.Marshal(map[string]any{"templateID": "base", "timeout": 120})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", apiURL+"/sandboxes", bytes.NewReader(body))
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("create of base while it builds: %v", err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create of base while it builds: %d %s", resp.StatusCode, rb)
	}
	var sb sandboxInfo
	if err := json.Unmarshal(rb, &sb); err != nil || sb.SandboxID == "" {
		t.Fatalf("create answer %s: %v", rb, err)
	}
	t.Logf("create of base answered after %s", time.Since(start).Round(time.Second))
	d := env{apiURL: apiURL, sandboxURL: apiURL, apiKey: apiKey}
	t.Cleanup(func() { d.kill(sb.SandboxID) })
	if r := d.run(t, sb, "user", "cat /etc/debian_version", 30*time.Second); r.exitCode != 0 || strings.TrimSpace(r.stdout) == "" {
		t.Errorf("command in the new base sandbox: %+v", r)
	}

	logs := strings.Split(logText(), "\n")
	hasLine := func(parts ...string) bool {
		for _, l := range logs {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(l, p)
			}
			if all {
				return true
			}
		}
		return false
	}
	for _, want := range [][]string{
		{`msg="create waits for its template, still building"`, "template=base", "phase="},
		{`msg="template built; create continues"`, "template=base"},
		{"base: ["}, // the build's own progress lines, named
	} {
		if !hasLine(want...) {
			t.Errorf("no daemon log line with %q", want)
		}
	}
	if code, h := getHealth(); code != http.StatusOK || len(h.Building) != 0 {
		t.Errorf("/health after the build = %d %+v, want ok with nothing building", code, h)
	}
}
