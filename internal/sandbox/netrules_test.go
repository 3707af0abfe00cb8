package sandbox_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

func testRules(t *testing.T) egressproxy.Rules {
	t.Helper()
	rs, err := egressproxy.ParseRules(json.RawMessage(`{"api.example.com":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.tok}"}}}]}`))
	if err != nil || len(rs) != 1 {
		t.Fatalf("ParseRules: %v %v", rs, err)
	}
	return rs
}

// network.rules are kept with the sandbox (issue 29): in its record, so
// that a fork, a pause/resume and a daemon restart keep them; the network
// update replaces them (nil clears).
func TestNetworkRulesKeptWithSandbox(t *testing.T) {
	t.Parallel()
	env := forkEnv(t, false)
	ctx := context.Background()
	rs := testRules(t)
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour, NetworkRules: rs})
	if !reflect.DeepEqual(sb.NetworkRules, rs) {
		t.Fatalf("created sandbox rules = %v, want %v", sb.NetworkRules, rs)
	}
	rec, err := env.Store.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var x struct {
		NetworkRules egressproxy.Rules `json:"networkRules"`
	}
	if err := json.Unmarshal([]byte(rec.Extra), &x); err != nil || !reflect.DeepEqual(x.NetworkRules, rs) {
		t.Fatalf("stored extra %s: %v", rec.Extra, err)
	}

	// Fork: the children have the parent's rules.
	res, err := env.Manager.Fork(ctx, sb.ID, 1, time.Minute)
	if err != nil || res[0].Err != nil {
		t.Fatalf("Fork: %v %+v", err, res)
	}
	if got, err := get(env.Manager, res[0].Sandbox.ID); err != nil || !reflect.DeepEqual(got.NetworkRules, rs) {
		t.Fatalf("child rules = %v, %v", got, err)
	}
	waitIdle(t, env.Manager, sb.ID)

	// Pause and resume keep them.
	if err := pause(env.Manager, ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if got, err := resume(env.Manager, ctx, sb.ID, time.Hour); err != nil || !reflect.DeepEqual(got.NetworkRules, rs) {
		t.Fatalf("resumed rules = %+v, %v", got, err)
	}

	// The update replaces them; no rules clears them.
	if err := setNetworkRules(env.Manager, ctx, sb.ID, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := get(env.Manager, sb.ID); err != nil || got.NetworkRules != nil {
		t.Fatalf("rules after clearing = %v, %v", got.NetworkRules, err)
	}
	if rec, err := env.Store.GetSandbox(ctx, sb.ID); err != nil || strings.Contains(rec.Extra, "networkRules") {
		t.Fatalf("stored extra after clearing = %q, %v", rec.Extra, err)
	}
}

// A restarted daemon gets the rules back from the record.
func TestNetworkRulesSurviveRestart(t *testing.T) {
	t.Parallel()
	env := forkEnv(t, false)
	ctx := context.Background()
	now := time.Now().UTC()
	_ = env.Store.PutSandbox(ctx, &store.Sandbox{ID: "irules", TemplateID: "base", State: "running", Slot: 7,
		GuestIP: "127.0.0.1", StartedAt: now, EndAt: now.Add(time.Hour), Metadata: map[string]string{}, AllowInternet: true,
		Extra: `{"networkRules":{"api.example.com":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.tok}"}}}]}}`})
	env.Runtime.States["irules"] = runtime.StateRunning
	env.Network.Slots["irules"] = 7
	env.Network.Namespace["irules"] = true
	if _, err := env.Manager.Reattach(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := get(env.Manager, "irules"); err != nil || !reflect.DeepEqual(got.NetworkRules, testRules(t)) {
		t.Fatalf("rules after restart = %v, %v", got, err)
	}
}

func setNetworkRules(m *sandbox.Manager, ctx context.Context, id string, rs egressproxy.Rules) error {
	e, err := m.Lookup(id)
	if err != nil {
		return err
	}
	return e.SetNetwork(ctx, true, network.Egress{}, rs)
}
