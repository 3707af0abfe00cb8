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

// On a runtime whose guests' traffic cannot be steered to the egress proxy
// (runtime.Caps.EgressSteering false), network.rules are refused with 501
// naming the runtime, at create and in a network update, before anything
// is set up; a sandbox without rules is created as before (issue 29).
func TestNetworkRulesRefusedWithoutEgressSteering(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) {
		c.Runtime.(*sandboxtest.Runtime).NoEgressSteering = true
	})
	ctx := context.Background()
	refused := func(what string, err error) {
		t.Helper()
		ue, ok := sandbox.AsUserError(err)
		if !ok || ue.Code != http.StatusNotImplemented || !strings.Contains(ue.Error(), `"fake" runtime`) {
			t.Fatalf("%s: err = %v, want a 501 naming the fake runtime", what, err)
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
