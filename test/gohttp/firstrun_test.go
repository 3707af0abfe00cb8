//go:build e2e

package gohttp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestServesFirstTemplateWhileOthersBuild starts a daemon whose data dir
// holds code-interpreter-v1 but not base (as a fresh host whose smaller
// template is ready first, the other way round): it serves at once, GET
// /health names base as still building, and a create of base waits for the
// build (the wait and the build's progress in the log) instead of failing.
func TestServesFirstTemplateWhileOthersBuild(t *testing.T) {
	// Own network: prefix "b" + the suite's, the third /24 from the top of
	// the suite's pool (the disk-full daemon has the top one, the warm-pool
	// daemon the next).
	fd := startSecondDaemon(t, secondDaemonOpts{Name: "firstrun", Templates: []string{"code-interpreter-v1"},
		Letter: "b", Below: 2, APIKey: "e2b_" + strings.Repeat("f1r5", 10), Args: []string{"--kill-on-exit", "--boot-snapshots=false"}, LogTail: 60})
	apiURL, apiKey := fd.apiURL, fd.apiKey
	logText := fd.log

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
