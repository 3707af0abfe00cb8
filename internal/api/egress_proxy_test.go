package api_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/approval"
	"github.com/airlock-sandbox/airlock/internal/secretbox"
)

func proxyHarness(t *testing.T, allowPrivate bool) (*harness, *secretbox.Box) {
	t.Helper()
	box, err := secretbox.New(make([]byte, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]string{"proxy.example.com": "203.0.113.5", "lan.example.com": "10.1.2.3", "lo.example.com": "127.0.0.1"}
	lookup := func(_ context.Context, host string) ([]netip.Addr, error) {
		if a, ok := hosts[host]; ok {
			return []netip.Addr{netip.MustParseAddr(a)}, nil
		}
		return nil, errors.New("no such host")
	}
	return newHarness(t, api.Options{EgressProxy: &api.EgressProxyOptions{Box: box, AllowPrivate: allowPrivate, Lookup: lookup}}), box
}

// TestEgressProxyValidation: network.egressProxy answered 501; now bad
// input is E2B's 400 "Invalid egress proxy config: …" on create and on
// PUT network, private and internal addresses included unless the
// operator allows them.
func TestEgressProxyValidation(t *testing.T) {
	t.Parallel()
	h, _ := proxyHarness(t, false)
	for body, want := range map[string]string{
		`{"username":"u"}`:                                    "address is required",
		`{"address":"no-port"}`:                               `address "no-port" is not host:port`,
		`{"address":"proxy.example.com:0"}`:                   "is not host:port",
		`{"address":"proxy.example.com:70000"}`:               "is not host:port",
		`{"address":"nope.example.com:1080"}`:                 "address nope.example.com does not resolve",
		`{"address":"lan.example.com:1080"}`:                  "resolves to a private or internal address (10.1.2.3)",
		`{"address":"lo.example.com:1080"}`:                   "private or internal address (127.0.0.1)",
		`{"address":"169.254.169.254:80"}`:                    "private or internal",
		`{"address":"100.64.0.1:1080"}`:                       "private or internal",
		`{"address":"[::1]:1080"}`:                            "private or internal",
		`{"address":"proxy.example.com:1080","password":"p"}`: "a password needs a username",
		`{"address":"proxy.example.com:1080","username":"` + strings.Repeat("u", 256) + `"}`:                "username is longer than 255 bytes",
		`{"address":"proxy.example.com:1080","username":"u","password":"` + strings.Repeat("p", 256) + `"}`: "password is longer than 255 bytes",
		`"proxy.example.com:1080"`: "want {address, username?, password?}",
	} {
		st, _, got := h.do(t, "POST", "/v2/sandboxes", `{"network":{"egressProxy":`+body+`}}`)
		assertError(t, st, got, 400, want)
		assertError(t, st, got, 400, "Invalid egress proxy config: ")
		st, _, got = h.do(t, "PUT", "/sandboxes/any/network", `{"egressProxy":`+body+`}`)
		assertError(t, st, got, 400, want)
	}
	// --egress-proxy-allow-private lifts the address check only.
	hp, _ := proxyHarness(t, true)
	if st, _, got := hp.do(t, "POST", "/v2/sandboxes", `{"templateID":"base","network":{"egressProxy":{"address":"lan.example.com:1080"}}}`); st != 201 {
		t.Fatalf("private proxy with --egress-proxy-allow-private = %d %s", st, got)
	}
	st, _, got := hp.do(t, "POST", "/v2/sandboxes", `{"network":{"egressProxy":{"address":"nope.example.com:1080"}}}`)
	assertError(t, st, got, 400, "does not resolve")
}

// TestEgressProxyKept: a valid egressProxy is kept with the sandbox (the
// network steers it: Options.EgressProxy), its password sealed in the
// store; GET shows it without the password; PUT network without it clears
// it (E2B's replace semantics); null is none.
func TestEgressProxyKept(t *testing.T) {
	t.Parallel()
	h, box := proxyHarness(t, false)
	const pass = "pr0xy-Passw0rd"
	st, _, body := h.do(t, "POST", "/v2/sandboxes", `{"templateID":"base","network":{"egressProxy":{"address":"proxy.example.com:1080","username":"alice","password":"`+pass+`"}}}`)
	if st != 201 {
		t.Fatalf("create = %d %s", st, body)
	}
	id := decode[map[string]any](t, body)["sandboxID"].(string)
	if !h.env.Network.Policy(id).EgressProxy {
		t.Fatalf("network options of the sandbox: %+v, want EgressProxy", h.env.Network.Policy(id))
	}
	rec, err := h.env.Store.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rec.Extra, pass) || !strings.Contains(rec.Extra, "passwordSealed") {
		t.Fatalf("stored record extra %s: want the password sealed, never in the clear", rec.Extra)
	}
	sb, err := viewOf(h.env.Manager, id)
	if err != nil {
		t.Fatal(err)
	}
	if pw, err := api.OpenProxyPassword(box, sb.EgressProxy); err != nil || pw != pass {
		t.Fatalf("OpenProxyPassword = %q, %v", pw, err)
	}
	st, _, body = h.do(t, "GET", "/sandboxes/"+id, "")
	if st != 200 || strings.Contains(string(body), pass) || strings.Contains(string(body), "password") {
		t.Fatalf("GET = %d %s: want no password", st, body)
	}
	n, _ := decode[map[string]any](t, body)["network"].(map[string]any)
	ep, _ := n["egressProxy"].(map[string]any)
	if ep["address"] != "proxy.example.com:1080" || ep["username"] != "alice" {
		t.Fatalf("GET network.egressProxy = %v", n["egressProxy"])
	}
	if st, _, body = h.do(t, "PUT", "/sandboxes/"+id+"/network", `{"egressProxy":null}`); st != 204 {
		t.Fatalf("PUT network = %d %s", st, body)
	}
	if h.env.Network.Policy(id).EgressProxy {
		t.Fatal("PUT network without egressProxy kept the tunnelling")
	}
	_, _, body = h.do(t, "GET", "/sandboxes/"+id, "")
	if strings.Contains(string(body), "egressProxy") {
		t.Fatalf("GET after PUT without egressProxy: %s", body)
	}
}

// TestEgressProxyWithApproval: a body with both an egressProxy and an
// approval hook is taken, on create and on update (the SOCKS relay holds
// the sandbox's connections for the hook); it was refused with 400 before.
func TestEgressProxyWithApproval(t *testing.T) {
	t.Parallel()
	box, err := secretbox.New(make([]byte, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("203.0.113.5")}, nil
	}
	h := newHarness(t, api.Options{
		EgressProxy: &api.EgressProxyOptions{Box: box, Lookup: lookup},
		Approvals:   &api.Approvals{Broker: approval.NewBroker(approval.Options{})},
	})
	both := `{"egressProxy":{"address":"proxy.example.com:1080"},"approval":{"stream":true}}`
	createID(t, h, `{"templateID":"base","network":`+both+`}`)
	id := createID(t, h, `{"network":{"approval":{"stream":true}}}`)
	if st, _, got := h.do(t, "PUT", "/sandboxes/"+id+"/network", both); st != 204 {
		t.Fatalf("PUT with both = %d %s, want 204", st, got)
	}
	if st, _, got := h.do(t, "PUT", "/sandboxes/"+id+"/network", `{"egressProxy":{"address":"proxy.example.com:1080"}}`); st != 204 {
		t.Fatalf("PUT egressProxy alone = %d %s, want 204", st, got)
	}
}
