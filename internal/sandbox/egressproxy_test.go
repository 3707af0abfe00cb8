package sandbox_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// A restarted daemon re-applies a sandbox's egressProxy (the tunnelling)
// from its record, and the relay finds it by the sandbox's address.
func TestRestoreReappliesEgressProxy(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	ctx := context.Background()
	now := time.Now().UTC()
	_ = env.Store.PutSandbox(ctx, &store.Sandbox{ID: "iproxy", TemplateID: "base", State: "running", Slot: 7,
		GuestIP: "127.0.0.1", StartedAt: now, EndAt: now.Add(time.Hour), Metadata: map[string]string{},
		AllowInternet: true, Extra: `{"egressProxy":{"address":"proxy.example.com:1080","username":"u","passwordSealed":"AAAA"}}`})
	env.Runtime.States["iproxy"] = runtime.StateRunning
	env.Network.Slots["iproxy"] = 7
	env.Network.Namespace["iproxy"] = true
	if _, err := env.Manager.Reattach(ctx); err != nil {
		t.Fatal(err)
	}
	if pol := env.Network.Policy("iproxy"); !pol.EgressProxy || !pol.AllowInternet {
		t.Fatalf("policy after restore = %+v, want EgressProxy", pol)
	}
	id, p, ok := env.Manager.EgressProxyFor(netip.MustParseAddr("127.0.0.1"))
	if !ok || id != "iproxy" || p.Address != "proxy.example.com:1080" || p.Username != "u" || p.PasswordSealed != "AAAA" {
		t.Fatalf("EgressProxyFor = %q, %+v, %v", id, p, ok)
	}
	sb, err := get(env.Manager, "iproxy")
	if err != nil || sb.EgressProxy == nil || sb.EgressProxy.Address != "proxy.example.com:1080" {
		t.Fatalf("Get = %+v, %v", sb, err)
	}
}
