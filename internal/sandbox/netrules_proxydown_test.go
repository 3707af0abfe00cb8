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
