//go:build e2e

package gohttp

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"
)

// TestEgressPolicySurvivesRestart: a restarted daemon rebuilds its nftables
// table; the stored allowOut/denyOut of a re-attached sandbox must be put
// back. Checked on the ruleset (documentation ranges; no traffic is sent —
// test/e2e/egress.test.mjs checks enforcement).
func TestEgressPolicySurvivesRestart(t *testing.T) {
	e := loadEnv(t)
	r := e.api(t, http.MethodPost, "/sandboxes", map[string]any{
		"templateID": "base", "timeout": 300, "allow_internet_access": true,
		"network": map[string]any{"allowOut": []string{"198.51.100.7", "allowed.test"}, "denyOut": []string{"192.0.2.0/24"}},
	})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var s sandboxInfo
	r.json(t, &s)
	t.Cleanup(func() { e.kill(s.SandboxID) })
	table := strings.TrimSuffix(netnsPrefix(), "-")
	ruleset := func() string {
		out, err := exec.Command("nft", "list", "table", "inet", table).CombinedOutput()
		if err != nil {
			t.Fatalf("nft list table inet %s: %v: %s", table, err, out)
		}
		return string(out)
	}
	want := []string{"ip daddr 198.51.100.7 accept", "ip daddr 192.0.2.0/24 drop"}
	// The domain rule: DNS redirect on and a learned set.
	dnsOn := func() bool {
		out, err := exec.Command("nft", "list", "set", "inet", table, "dns_ifaces").CombinedOutput()
		return err == nil && strings.Contains(string(out), "elements")
	}
	for _, w := range want {
		if !strings.Contains(ruleset(), w) {
			t.Fatalf("positive control: ruleset lacks %q before the restart", w)
		}
	}
	if !dnsOn() || !strings.Contains(ruleset(), "ip daddr @dl_") {
		t.Fatalf("positive control: no DNS filter for the domain rule before the restart:\n%s", ruleset())
	}

	restartDaemon(t, e, func() {})
	text := ruleset()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("after restart the ruleset lacks %q:\n%s", w, text)
		}
	}
	info := mustMap(t, e.api(t, http.MethodGet, "/sandboxes/"+s.SandboxID, nil))
	nw, _ := info["network"].(map[string]any)
	if nw == nil || len(nw["allowOut"].([]any)) != 2 || len(nw["denyOut"].([]any)) != 1 {
		t.Fatalf("network after restart = %v", info["network"])
	}
	if !dnsOn() || !strings.Contains(text, "ip daddr @dl_") {
		t.Errorf("after restart the domain rule has no DNS filter:\n%s", text)
	}

	// PUT {} clears everything.
	if r := e.api(t, http.MethodPut, "/sandboxes/"+s.SandboxID+"/network", map[string]any{}); r.status != http.StatusNoContent {
		t.Fatalf("PUT network: %d %s", r.status, r.body)
	}
	if text := ruleset(); strings.Contains(text, want[0]) || strings.Contains(text, want[1]) || dnsOn() {
		t.Errorf("policy left after PUT {}:\n%s", text)
	}
}
