//go:build e2e

package gohttp

// The proof of issue 29's egress secrets against the daemon: a sandbox
// created with E2B's network.rules (Authorization: Bearer
// ${e2b.secrets.<name>}) reaches an HTTPS server in the stand-in internet,
// and the SERVER sees the secret, which the sandbox never holds; every way
// around the rule (another name, another Host than the TLS name, plain
// HTTP, an upstream the node does not trust) sends no secret; a resumed
// sandbox still gets it. scripts/test.sh makes the upstream CA
// (AIRLOCK_E2E_UPSTREAM_CA_DIR) and starts the daemon trusting it with
// --egress-proxy-upstream-ca, resolving names through <ext>.12.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestSecretsProxy(t *testing.T) {
	e := loadEnv(t)
	w := newStandIn(t)
	log := &w.log
	ipA := w.ipA
	tag := uniqueTag(t)

	// The secret, and a sandbox whose rules name it for A and C (E2B's shape).
	secretName := "e2e-proxy-" + tag
	value := "airlock-proof-" + tag + "-SECRETVALUE"
	r := e.api(t, http.MethodPost, "/secrets", map[string]any{"name": secretName, "value": value})
	if r.status != http.StatusCreated {
		t.Fatalf("POST /secrets = %d %s", r.status, r.body)
	}
	t.Cleanup(func() { e.api(t, http.MethodDelete, "/secrets/"+secretName, nil) })
	inject := []map[string]any{{"transform": map[string]any{"headers": map[string]string{"Authorization": "Bearer ${e2b.secrets." + secretName + "}"}}}}
	r = e.api(t, http.MethodPost, "/sandboxes", map[string]any{
		"templateID": "base", "timeout": 300, "secure": true, "allow_internet_access": true,
		"network": map[string]any{"rules": map[string]any{nameA: inject, nameC: inject}},
	})
	if r.status != http.StatusCreated {
		t.Fatalf("POST /sandboxes with rules = %d %s", r.status, r.body)
	}
	var s sandboxInfo
	r.json(t, &s)
	t.Cleanup(func() { e.kill(s.SandboxID) })
	if bytesHas(r.body, value) {
		t.Fatalf("create response holds the secret: %s", r.body)
	}

	curl := func(args string) cmdResult {
		t.Helper()
		return e.run(t, s, "user", "curl -sS -m 20 -w '\\n%{http_code}' "+args, 2*time.Minute)
	}
	secretSeen := func() []seen {
		var out []seen
		for _, q := range log.all() {
			for _, vs := range q.header {
				for _, v := range vs {
					if strings.Contains(v, value) {
						out = append(out, q)
					}
				}
			}
		}
		return out
	}
	ruled := func(when string) {
		t.Helper()
		n := len(log.all())
		res := curl("https://" + nameA + "/headers")
		got := log.all()[n:]
		if res.exitCode != 0 || len(got) != 1 || got[0].server != "A" || got[0].host != nameA ||
			got[0].header.Get("Authorization") != "Bearer "+value {
			t.Fatalf("%s: curl https://%s/headers = %d %q %q; server saw %+v; want one request with the injected secret",
				when, nameA, res.exitCode, res.stdout, res.stderr, got)
		}
	}
	ruled("first request")

	// The sandbox never holds the value: not in any process's environment or
	// command line, nor in a file under /home, /tmp, /etc or /root.
	dump := e.run(t, s, "root", "env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' <$f; done 2>/dev/null; true", time.Minute)
	if strings.Contains(dump.stdout, value) || !strings.Contains(dump.stdout, "PATH=") {
		t.Errorf("environ/cmdline dump holds the secret (or is empty): %d bytes", len(dump.stdout))
	}
	half := len(value) / 2
	grep := e.run(t, s, "root", fmt.Sprintf("p1='%s'; p2='%s'; grep -rlaF -- \"$p1$p2\" /home /tmp /etc /root /usr/local/share 2>/dev/null; true", value[:half], value[half:]), 2*time.Minute)
	if strings.TrimSpace(grep.stdout) != "" {
		t.Errorf("files in the sandbox hold the secret: %s", grep.stdout)
	}

	// Another name (no rule): relayed untouched, server B gets no secret.
	before := len(log.all())
	if res := curl("-k https://" + nameB + "/"); res.exitCode != 0 || !strings.Contains(res.stdout, `"server":"B"`) {
		t.Errorf("curl https://%s/ = %d %q %q", nameB, res.exitCode, res.stdout, res.stderr)
	}
	// Host other than the TLS name (SNI A): 421 from the proxy, nothing upstream.
	if res := curl("-H 'Host: " + nameB + "' https://" + nameA + "/headers"); !strings.HasSuffix(strings.TrimSpace(res.stdout), "421") {
		t.Errorf("Host %s over SNI %s = %d %q %q; want 421", nameB, nameA, res.exitCode, res.stdout, res.stderr)
	}
	// SNI B to A's (steered) address: not a ruled name, so no secret.
	if res := curl("-k --resolve " + nameB + ":443:" + ipA + " https://" + nameB + "/headers"); res.exitCode != 0 {
		t.Errorf("SNI %s to %s = %d %q %q", nameB, ipA, res.exitCode, res.stdout, res.stderr)
	}
	// Plain HTTP to the ruled name: no downgrade, relayed untouched.
	if res := curl("http://" + nameA + "/headers"); res.exitCode != 0 || !strings.Contains(res.stdout, `"server":"A-plain"`) {
		t.Errorf("curl http://%s/ = %d %q %q", nameA, res.exitCode, res.stdout, res.stderr)
	}
	// An upstream whose certificate the node does not trust: the sandbox's
	// own handshake fails, and the server never gets a request.
	if res := curl("https://" + nameC + "/headers"); res.exitCode == 0 {
		t.Errorf("curl https://%s (untrusted upstream) = %q; want a TLS failure", nameC, res.stdout)
	}
	var sawC bool
	for _, q := range log.all()[before:] {
		sawC = sawC || q.server == "C"
	}
	if leaks := secretSeen(); len(leaks) != 1 || sawC {
		t.Errorf("after the bypass attempts the servers saw the secret %d times (want only the first ruled request): %+v; C reached: %v", len(leaks), leaks, sawC)
	}

	// Pause and resume: the rules and the CA come back with the sandbox.
	if r := e.api(t, http.MethodPost, "/sandboxes/"+s.SandboxID+"/pause", nil); r.status != http.StatusNoContent {
		t.Fatalf("pause = %d %s", r.status, r.body)
	}
	if r := e.api(t, http.MethodPost, "/sandboxes/"+s.SandboxID+"/connect", map[string]any{"timeout": 300}); r.status/100 != 2 {
		t.Fatalf("connect (resume) = %d %s", r.status, r.body)
	}
	ruled("after pause and resume")
}

func bytesHas(b []byte, s string) bool { return strings.Contains(string(b), s) }
