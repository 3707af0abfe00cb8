package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/approval"
)

// TestApprovalConfigAPI: network.approval on create and PUT, the echo
// without the secret, the 400s, and the 501 of a daemon without the hold.
func TestApprovalConfigAPI(t *testing.T) {
	t.Parallel()
	broker := approval.NewBroker(approval.Options{})
	h := newHarness(t, api.Options{Approvals: &api.Approvals{Broker: broker, CheckURL: func(_ context.Context, u string) error {
		if strings.Contains(u, "127.0.0.1") {
			return errors.New("url 127.0.0.1 resolves to 127.0.0.1, a loopback address: webhooks may not reach private networks")
		}
		return nil
	}}})
	id := createID(t, h, `{"network":{"approval":{"webhook":{"url":"https://hooks.example.com/a","secret":"s3cret"},"timeoutMs":2000}}}`)
	if pol := h.env.Network.Policy(id); !pol.Egress.Hold {
		t.Fatalf("Setup got %+v, want Egress.Hold", pol)
	}
	st, _, body := h.do(t, "GET", "/sandboxes/"+id, "")
	if st != 200 || strings.Contains(string(body), "s3cret") {
		t.Fatalf("GET = %d %s (the secret must not be echoed)", st, body)
	}
	var info struct {
		Network struct {
			Approval *approval.Config `json:"approval"`
		} `json:"network"`
	}
	if err := json.Unmarshal(body, &info); err != nil || info.Network.Approval == nil ||
		info.Network.Approval.Webhook.URL != "https://hooks.example.com/a" || info.Network.Approval.TimeoutMs != 2000 || info.Network.Approval.OnTimeout != "deny" {
		t.Fatalf("echo %s: %v", body, err)
	}
	rec, err := h.env.Store.GetSandbox(t.Context(), id)
	if err != nil || !strings.Contains(rec.Extra, `"approval"`) {
		t.Fatalf("stored record lacks the hook: %v %q", err, rec.Extra)
	}

	for _, tc := range []struct{ body, want string }{
		{`{"approval":{}}`, "name a hook"},
		{`{"approval":{"stream":true,"timeoutMs":5}}`, "timeoutMs must be from"},
		{`{"approval":{"stream":true,"onTimeout":"allow"}}`, "onTimeout"},
		{`{"approval":{"webhook":{"url":"hooks.example.com"}}}`, "absolute http"},
		{`{"approval":{"webhook":{"url":"http://127.0.0.1:9/h"}}}`, "private networks"},
	} {
		st, _, body := h.do(t, "PUT", "/sandboxes/"+id+"/network", tc.body)
		if st != 400 || !strings.Contains(string(body), tc.want) {
			t.Errorf("PUT %s = %d %s, want 400 with %q", tc.body, st, body, tc.want)
		}
	}
	st, _, body = h.do(t, "PUT", "/sandboxes/"+id+"/network", `{"approval":{"stream":true}}`)
	if st != 204 {
		t.Fatalf("PUT stream = %d %s", st, body)
	}
	if hook := broker.Hook(id); hook != nil {
		t.Fatalf("broker has a registered hook %+v; hooks are looked up from the sandbox (HookOf)", hook)
	}
	st, _, body = h.do(t, "PUT", "/sandboxes/"+id+"/network", `{}`)
	if st != 204 || h.env.Network.Policy(id).Egress.Hold {
		t.Fatalf("PUT {} = %d %s; hold %v, want removed", st, body, h.env.Network.Policy(id).Egress.Hold)
	}
	st, _, _ = h.do(t, "POST", "/sandboxes/"+id+"/network/approvals/nope", `{"decision":"allow"}`)
	if st != 404 {
		t.Errorf("answer to an unknown decision = %d, want 404", st)
	}
	st, _, _ = h.do(t, "POST", "/sandboxes/"+id+"/network/approvals/nope", `{"decision":"maybe"}`)
	if st != 400 {
		t.Errorf("bad answer = %d, want 400", st)
	}

	off := newHarness(t, api.Options{})
	st, _, body = off.do(t, "POST", "/sandboxes", `{"templateID":"base","network":{"approval":{"stream":true}}}`)
	if st != 501 {
		t.Errorf("create with a hook on a daemon without it = %d %s, want 501", st, body)
	}
}

// TestApprovalWebhookSecretSealed: the hook's signing secret is stored
// sealed (Approvals.Seal), never as given, and never echoed.
func TestApprovalWebhookSecretSealed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{Approvals: &api.Approvals{Broker: approval.NewBroker(approval.Options{}),
		Seal: func(url, secret string) (string, error) { return "sealed(" + url + ")", nil }}})
	id := createID(t, h, `{"network":{"approval":{"webhook":{"url":"https://hooks.example.com/a","secret":"s3cret"}}}}`)
	rec, err := h.env.Store.GetSandbox(t.Context(), id)
	if err != nil || strings.Contains(rec.Extra, "s3cret") || !strings.Contains(rec.Extra, "sealed(https://hooks.example.com/a)") {
		t.Fatalf("stored record %q (%v): want the secret sealed", rec.Extra, err)
	}
	if st, _, body := h.do(t, "GET", "/sandboxes/"+id, ""); st != 200 || strings.Contains(string(body), "sealed(") {
		t.Fatalf("GET = %d %s: the sealed secret must not be echoed either", st, body)
	}
}

// TestApprovalAnswerBy: POST …/approvals/{decisionId} records who answered
// from its "by" (the console says "console"; without it, a stream
// client), and refuses a "by" that is not an answering client.
func TestApprovalAnswerBy(t *testing.T) {
	t.Parallel()
	broker := approval.NewBroker(approval.Options{})
	h := newHarness(t, api.Options{Approvals: &api.Approvals{Broker: broker}})
	id := createID(t, h, `{"network":{"approval":{"stream":true}}}`)
	broker.Set(id, &approval.Config{Stream: true, TimeoutMs: 5000})
	s := broker.Listen(id)
	defer broker.Unlisten(s)
	for _, tc := range []struct{ body, want string }{
		{`{"decision":"deny","by":"console"}`, approval.ByConsole},
		{`{"decision":"deny","by":"api"}`, approval.ByAPI},
		{`{"decision":"deny"}`, approval.ByStream},
	} {
		got := make(chan approval.Answer, 1)
		go func() {
			got <- broker.Ask(t.Context(), id, approval.Dest{Protocol: "tcp", Addr: netip.MustParseAddr("203.0.113.9"), Port: 443})
		}()
		q := <-s.C
		if st, _, body := h.do(t, "POST", "/sandboxes/"+id+"/network/approvals/"+q.DecisionID, `{"decision":"allow","by":"webhook"}`); st != 400 || !strings.Contains(string(body), "by must be") {
			t.Fatalf(`answer with by "webhook" = %d %s, want 400`, st, body)
		}
		if st, _, body := h.do(t, "POST", "/sandboxes/"+id+"/network/approvals/"+q.DecisionID, tc.body); st != 204 {
			t.Fatalf("answer %s = %d %s", tc.body, st, body)
		}
		if a := <-got; a.Allow || a.By != tc.want {
			t.Fatalf("answer %s recorded %+v, want a deny by %q", tc.body, a, tc.want)
		}
	}
}
