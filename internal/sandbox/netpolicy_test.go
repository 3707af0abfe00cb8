package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// A restarted daemon rebuilds its firewall: re-attached sandboxes must get
// their stored egress policy back.
func TestRestoreReappliesEgress(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	ctx := context.Background()
	now := time.Now().UTC()
	_ = env.Store.PutSandbox(ctx, &store.Sandbox{ID: "ipolicy", TemplateID: "base", State: "running", Slot: 6,
		GuestIP: "127.0.0.1", StartedAt: now, EndAt: now.Add(time.Hour), Metadata: map[string]string{},
		AllowInternet: false, Extra: `{"allowOut":["10.78.9.2"],"denyOut":["0.0.0.0/0"]}`})
	env.Runtime.States["ipolicy"] = runtime.StateRunning
	env.Network.Slots["ipolicy"] = 6
	env.Network.Namespace["ipolicy"] = true
	if _, err := env.Manager.Reattach(ctx); err != nil {
		t.Fatal(err)
	}
	pol := env.Network.Policy("ipolicy")
	if pol.AllowInternet || len(pol.Egress.Allow) != 1 || pol.Egress.Allow[0].String() != "10.78.9.2/32" ||
		len(pol.Egress.Deny) != 1 || pol.Egress.Deny[0].String() != "0.0.0.0/0" {
		t.Fatalf("policy after restore = %+v", pol)
	}
	sb, err := get(env.Manager, "ipolicy")
	if err != nil || len(sb.AllowOut) != 1 || len(sb.DenyOut) != 1 {
		t.Fatalf("Get = %+v, %v", sb, err)
	}

	// SetNetwork updates the network and the record.
	eg, err := sandbox.ParseEgress(nil, []string{"192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := setNetwork(env.Manager, ctx, "ipolicy", true, eg); err != nil {
		t.Fatal(err)
	}
	rec, err := env.Store.GetSandbox(ctx, "ipolicy")
	if err != nil || !rec.AllowInternet || rec.Extra != `{"denyOut":["192.0.2.1"]}` {
		t.Fatalf("stored = %+v, %v", rec, err)
	}
	if err := setNetwork(env.Manager, ctx, "inope", true, eg); err == nil {
		t.Fatal("SetNetwork on an unknown sandbox succeeded")
	}
	if _, err := sandbox.ParseEgress([]string{"exa mple.com"}, nil); err == nil {
		t.Fatal("junk domain accepted")
	}
	// Domain rules survive the record round trip.
	eg, err = sandbox.ParseEgress([]string{"*.x.test"}, []string{"0.0.0.0/0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := setNetwork(env.Manager, ctx, "ipolicy", true, eg); err != nil {
		t.Fatal(err)
	}
	if rec, err := env.Store.GetSandbox(ctx, "ipolicy"); err != nil || rec.Extra != `{"allowOut":["*.x.test"],"denyOut":["0.0.0.0/0"]}` {
		t.Fatalf("stored = %+v, %v", rec, err)
	}
}
