package sandbox_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// On a node whose egress proxy did not start (Config.EgressProxyDown),
// network.rules are refused with 503 naming the proxy, at create and in a
// network update, before anything is set up, and the reason (an operator's
// detail) stays in the log; a sandbox without rules is created as before
// (issue 29: never a sandbox whose ruled traffic nothing intercepts).
func TestNetworkRulesRefusedWithoutEgressProxy(t *testing.T) {
	t.Parallel()
	const reason = "reading --egress-proxy-upstream-ca: open /etc/secret-path/ca.pem: no such file or directory"
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.EgressProxyDown = reason })
	ctx := context.Background()
	refused := func(what string, err error) {
		t.Helper()
		ue, ok := sandbox.AsUserError(err)
		if !ok || ue.Code != http.StatusServiceUnavailable || !strings.Contains(ue.Error(), "egress proxy is not running") || strings.Contains(ue.Error(), "secret-path") {
			t.Fatalf("%s: err = %v, want a 503 naming the egress proxy (without the operator's reason)", what, err)
		}
	}
	_, err := env.Manager.Create(ctx, sandbox.CreateRequest{Timeout: time.Hour, NetworkRules: testRules(t)})
	refused("create with rules", err)
	if n := len(env.Runtime.Specs); n != 0 {
		t.Fatalf("a refused create started %d runtime sandboxes", n)
	}
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	e, err := env.Manager.Lookup(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	refused("network update with rules", e.SetNetwork(ctx, sandbox.NetworkUpdate{AllowInternet: true, Rules: testRules(t)}))
	if got, err := get(env.Manager, sb.ID); err != nil || got.NetworkRules != nil {
		t.Fatalf("rules after a refused update = %v, %v", got, err)
	}
	if err := e.SetNetwork(ctx, sandbox.NetworkUpdate{AllowInternet: true}); err != nil {
		t.Fatalf("network update without rules: %v", err)
	}
}

// A sandbox with rules that was paused (or keeps running) while its node's
// egress proxy was up, on a daemon restarted with the proxy down: its
// resume and its fork are refused with the same 503 before anything is set
// up (not an internal error from the network set-up), the paused sandbox
// stays paused, and a sandbox without rules resumes as before.
func TestNetworkRulesResumeAndForkRefusedWithoutEgressProxy(t *testing.T) {
	t.Parallel()
	var cfg sandbox.Config
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) {
		c.Runtime = &cloneRuntime{CkRuntime: &ckRuntime{Runtime: c.Runtime.(*sandboxtest.Runtime)}}
		c.CABundle = func() []byte { return []byte(testCAPEM) }
		cfg = *c
	})
	env.Agent.Extra = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/freeze" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	ctx := context.Background()
	paused := create(t, env, sandbox.CreateRequest{Timeout: time.Hour, NetworkRules: testRules(t)})
	running := create(t, env, sandbox.CreateRequest{Timeout: time.Hour, NetworkRules: testRules(t)})
	plain := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	for _, id := range []string{paused.ID, plain.ID} {
		waitIdle(t, env.Manager, id)
		if err := pause(env.Manager, ctx, id); err != nil {
			t.Fatalf("pause %s: %v", id, err)
		}
	}
	_ = env.Manager.Close(ctx)

	cfg.EgressProxyDown = "reading --egress-proxy-upstream-ca: open /etc/secret-path/ca.pem: no such file or directory"
	m2, err := sandbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m2.SetReady(true)
	defer m2.Close(ctx)
	if _, err := m2.Reattach(ctx); err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error) {
		t.Helper()
		ue, ok := sandbox.AsUserError(err)
		if !ok || ue.Code != http.StatusServiceUnavailable || !strings.Contains(ue.Error(), "egress proxy is not running") || strings.Contains(ue.Error(), "secret-path") {
			t.Fatalf("%s: err = %v, want a 503 naming the egress proxy (without the operator's reason)", what, err)
		}
	}
	specs := len(env.Runtime.Specs)
	_, err = resume(m2, ctx, paused.ID, time.Hour)
	refused("resume of a paused sandbox with rules", err)
	if got, err := get(m2, paused.ID); err != nil || got.State != "paused" {
		t.Fatalf("after the refused resume: %+v, %v; want it still paused", got, err)
	}
	res, err := m2.Fork(ctx, running.ID, 1, time.Minute)
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	refused("fork of a sandbox with rules", res[0].Err)
	if n := len(env.Runtime.Specs); n != specs {
		t.Fatalf("the refused resume and fork started %d runtime sandboxes", n-specs)
	}
	if _, err := resume(m2, ctx, plain.ID, time.Hour); err != nil {
		t.Fatalf("resume without rules: %v", err)
	}
}
