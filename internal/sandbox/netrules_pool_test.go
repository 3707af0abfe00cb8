package sandbox_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// A create with network rules is not served from the warm pool: a pooled
// sandbox's network was set up without them (no DNS filter, no steering to
// the egress proxy), so a claimed one would record rules that nothing
// enforces. It restores the boot snapshot instead, with its domains
// steered from the network set-up on (issue 29).
func TestWarmPoolNotClaimedWithNetworkRules(t *testing.T) {
	t.Parallel()
	sb, env := createBesidePool(t, sandbox.CreateRequest{Timeout: time.Minute, NetworkRules: testRules(t)})
	if got := env.Network.Policy(sb.ID).Intercept; !slices.Equal(got, []string{"api.example.com"}) {
		t.Fatalf("network set up with Intercept %v, want the ruled domain", got)
	}
}

// Nor is a create with an egressProxy: a pooled sandbox's traffic is not
// steered to the SOCKS relay, so it would leave directly.
func TestWarmPoolNotClaimedWithEgressProxy(t *testing.T) {
	t.Parallel()
	sb, env := createBesidePool(t, sandbox.CreateRequest{Timeout: time.Minute,
		EgressProxy: &sandbox.EgressProxy{Address: "203.0.113.9:1080"}})
	if !env.Network.Policy(sb.ID).EgressProxy {
		t.Fatal("network set up without the egressProxy steering")
	}
}

// createBesidePool fills a one-sandbox warm pool for base, then creates
// with req, and checks that the create restored a sandbox of its own and
// left the pooled one idle.
func createBesidePool(t *testing.T, req sandbox.CreateRequest) (*sandbox.Sandbox, *sandboxtest.Env) {
	t.Helper()
	env, rt := snapEnvWith(t, func(c *sandbox.Config) {
		c.BootSnapshots = true
		c.WarmPool = map[string]int{"base": 1}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := env.Manager.PrepareBootSnapshot(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		env.Manager.RunWarmPool(ctx)
		close(done)
	}()
	defer func() {
		cancel()
		<-done
		env.Manager.DrainWarmPool(context.Background())
	}()
	loads := func() int {
		rt.Mu.Lock()
		defer rt.Mu.Unlock()
		return len(rt.Loaded)
	}
	deadline := time.Now().Add(10 * time.Second)
	for env.Manager.WarmPoolSizes()["base"] != 1 || loads() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("pool = %v, loads %d; want 1 idle after 1 load", env.Manager.WarmPoolSizes(), loads())
		}
		time.Sleep(5 * time.Millisecond)
	}
	sb := create(t, env, req)
	if loads() != 2 || env.Manager.WarmPoolSizes()["base"] != 1 {
		t.Fatalf("create: loads %d, pool %v; want a restore of its own and the pooled sandbox left idle", loads(), env.Manager.WarmPoolSizes())
	}
	return sb, env
}
