//go:build e2e

package gohttp

import (
	"strings"
	"testing"
	"time"
)

// TestAutomaticWarmPool starts a daemon with default flags (the suite's own
// daemon turns the pool off, because its leak checks count every runtime
// sandbox): code-interpreter-v1 gets a warm pool by itself, creates are
// served from it, and a burst of creates grows it (sized from the last
// minute's demand).
func TestAutomaticWarmPool(t *testing.T) {
	// Own network: prefix "w" + the suite's, the /24 below the disk-full
	// daemon's at the top of the suite's pool.
	wd := startSecondDaemon(t, secondDaemonOpts{Name: "warmpool", Templates: []string{"base", "code-interpreter-v1"},
		Letter: "w", Below: 1, APIKey: "e2b_" + strings.Repeat("5eed", 10), Args: []string{"--kill-on-exit"}})
	d := wd.env
	count := func(s string) int { return strings.Count(wd.log(), s) }
	if !waitFor(4*time.Minute, time.Second, func() bool { return count(`msg="warm pool: sandbox ready"`) >= 1 }) {
		t.Fatal("no pooled sandbox 4 min after start with default flags")
	}
	create := func() string {
		r := d.api(t, "POST", "/sandboxes", map[string]any{"templateID": "code-interpreter-v1", "timeout": 120})
		if r.status != 201 {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		var s sandboxInfo
		r.json(t, &s)
		t.Cleanup(func() { d.kill(s.SandboxID) })
		return s.SandboxID
	}
	servedFromPool := func(id string) bool {
		return waitFor(10*time.Second, 200*time.Millisecond, func() bool {
			for _, l := range strings.Split(wd.log(), "\n") {
				if strings.Contains(l, `msg="sandbox created from the warm pool"`) && strings.Contains(l, "sandbox="+id) {
					return true
				}
			}
			return false
		})
	}
	first := create()
	if !servedFromPool(first) {
		t.Errorf("create %s was not served from the automatic pool", first)
	}
	// The claim started a refill; a create arriving while it runs waits
	// for it (or finds it done) instead of restoring a second sandbox.
	if !waitFor(30*time.Second, 20*time.Millisecond, func() bool { return count(`msg="warm pool: filling"`) >= 2 }) {
		t.Fatal("no refill started after the pooled sandbox was claimed")
	}
	second := create()
	if !servedFromPool(second) {
		t.Errorf("create %s, made while the pool refilled, was not served by the refill", second)
	}
	// The warm pool's forward steps (internal/sandbox/doc.go) are on /metrics.
	met := scrapeMetrics(t, d)
	for _, k := range []struct{ op, kind, steps string }{
		{"create", "pool", "claim init register"},
		{"pool", "fill", "network clone restore wake wait"},
	} {
		for _, s := range strings.Fields(k.steps) {
			if n := met[stepKey("count", k.op, k.kind, s)]; n < 1 {
				t.Errorf("%s = %v, want ≥ 1", stepKey("count", k.op, k.kind, s), n)
			}
		}
	}
	// A burst: the pool is sized from the last minute's creates, so it
	// grows past one (the log reports idle=2 or more at some point).
	for i := 0; i < 3; i++ {
		create()
	}
	if !waitFor(3*time.Minute, time.Second, func() bool {
		txt := wd.log()
		return strings.Contains(txt, "idle=2") || strings.Contains(txt, "idle=3") || strings.Contains(txt, "idle=4")
	}) {
		t.Errorf("the automatic pool never held more than one sandbox after a burst of creates")
	}
}
