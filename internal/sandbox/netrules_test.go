package sandbox_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
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
	return e.SetNetwork(ctx, sandbox.NetworkUpdate{AllowInternet: true, Rules: rs})
}

const testCAPEM = "-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"

// The node's egress proxy CA goes to sandboxes with rules in /init: at
// create, to a fork's children and again after a resume (the CA is made
// anew at each daemon start); never to a sandbox without rules.
func TestCABundleOnlyWithRules(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) {
		c.Runtime = &cloneRuntime{CkRuntime: &ckRuntime{Runtime: c.Runtime.(*sandboxtest.Runtime)}}
		c.CABundle = func() []byte { return []byte(testCAPEM) }
	})
	env.Agent.Extra = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/freeze" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	ctx := context.Background()
	lastCA := func(what string) *string {
		t.Helper()
		b, ok := env.Agent.LastInit()
		if !ok {
			t.Fatalf("%s: no /init", what)
		}
		return b.CABundle
	}
	plain := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	if ca := lastCA("create without rules"); ca != nil {
		t.Fatalf("a sandbox without rules got a caBundle: %q", *ca)
	}
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour, NetworkRules: testRules(t), Secure: true})
	if ca := lastCA("create with rules"); ca == nil || *ca != testCAPEM {
		t.Fatalf("create with rules: caBundle %v", ca)
	}
	res, err := env.Manager.Fork(ctx, sb.ID, 1, time.Minute)
	if err != nil || res[0].Err != nil {
		t.Fatalf("Fork: %v %+v", err, res)
	}
	if ca := lastCA("fork child"); ca == nil || *ca != testCAPEM {
		t.Fatalf("fork child: caBundle %v", ca)
	}
	waitIdle(t, env.Manager, sb.ID)
	if err := pause(env.Manager, ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	n := len(env.Agent.Inits)
	if _, err := resume(env.Manager, ctx, sb.ID, time.Hour); err != nil {
		t.Fatalf("resume: %v", err)
	}
	b, _ := env.Agent.LastInit()
	if len(env.Agent.Inits) != n+1 || b.CABundle == nil || *b.CABundle != testCAPEM || b.AccessToken == nil || *b.AccessToken != sb.AccessToken {
		t.Fatalf("after resume: %d inits (was %d), last %+v; want one with the CA and the sandbox's token kept", len(env.Agent.Inits), n, b)
	}
	if err := pause(env.Manager, ctx, plain.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	n = len(env.Agent.Inits)
	if _, err := resume(env.Manager, ctx, plain.ID, time.Hour); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if len(env.Agent.Inits) != n {
		t.Fatal("a sandbox without rules was re-initialised after its resume")
	}
}

// Rules that a network update gives a sandbox created without any bring
// the node's CA with them (its TLS to the ruled domains would fail
// otherwise); an update that keeps rules it already had does not re-init.
func TestCABundleWhenRulesArriveLive(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) {
		c.CABundle = func() []byte { return []byte(testCAPEM) }
	})
	ctx := context.Background()
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour, Secure: true})
	n := len(env.Agent.Inits)
	if err := setNetworkRules(env.Manager, ctx, sb.ID, testRules(t)); err != nil {
		t.Fatalf("SetNetwork: %v", err)
	}
	b, _ := env.Agent.LastInit()
	if len(env.Agent.Inits) != n+1 || b.CABundle == nil || *b.CABundle != testCAPEM || b.AccessToken == nil || *b.AccessToken != sb.AccessToken {
		t.Fatalf("after rules arrived: %d inits (was %d), last %+v; want one with the CA and the token kept", len(env.Agent.Inits), n, b)
	}
	if err := setNetworkRules(env.Manager, ctx, sb.ID, testRules(t)); err != nil {
		t.Fatalf("SetNetwork again: %v", err)
	}
	if len(env.Agent.Inits) != n+1 {
		t.Fatalf("an update keeping the rules re-initialised the agent (%d inits, want %d)", len(env.Agent.Inits), n+1)
	}
}
