package api_test

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/audit"
)

type netInfo struct {
	AllowInternetAccess bool `json:"allowInternetAccess"`
	Network             struct {
		AllowOut           []string `json:"allowOut"`
		DenyOut            []string `json:"denyOut"`
		AllowPublicTraffic bool     `json:"allowPublicTraffic"`
	} `json:"network"`
}

func getNet(t *testing.T, h *harness, id string) netInfo {
	t.Helper()
	st, _, body := h.do(t, "GET", "/sandboxes/"+id, "")
	if st != 200 {
		t.Fatalf("info = %d %s", st, body)
	}
	var n netInfo
	if err := json.Unmarshal(body, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNetworkPolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	id := createID(t, h, `{"allow_internet_access":false,"network":{"allowOut":["10.78.9.2"],"denyOut":["0.0.0.0/0"]}}`)
	pol := h.env.Network.Policy(id)
	if pol.AllowInternet || len(pol.Egress.Allow) != 1 || len(pol.Egress.Deny) != 1 {
		t.Fatalf("Setup got %+v", pol)
	}
	n := getNet(t, h, id)
	if n.AllowInternetAccess || !reflect.DeepEqual(n.Network.AllowOut, []string{"10.78.9.2"}) ||
		!reflect.DeepEqual(n.Network.DenyOut, []string{"0.0.0.0/0"}) || !n.Network.AllowPublicTraffic {
		t.Fatalf("info network = %+v", n)
	}
	// The policy is persisted for a restart.
	rec, err := h.env.Store.GetSandbox(t.Context(), id)
	if err != nil || rec.Extra == "" {
		t.Fatalf("stored record: %v %q", err, rec.Extra)
	}

	// PUT replaces the whole policy; omitted fields are cleared.
	st, _, body := h.do(t, "PUT", "/sandboxes/"+id+"/network", `{"denyOut":["192.0.2.0/24"]}`)
	if st != 204 {
		t.Fatalf("PUT network = %d %s", st, body)
	}
	pol = h.env.Network.Policy(id)
	if !pol.AllowInternet || len(pol.Egress.Allow) != 0 || len(pol.Egress.Deny) != 1 {
		t.Fatalf("SetPolicy got %+v", pol)
	}
	n = getNet(t, h, id)
	if !n.AllowInternetAccess || n.Network.AllowOut != nil || !reflect.DeepEqual(n.Network.DenyOut, []string{"192.0.2.0/24"}) {
		t.Fatalf("info after PUT = %+v", n)
	}
	st, _, body = h.do(t, "PUT", "/sandboxes/"+id+"/network", `{}`)
	if st != 204 {
		t.Fatalf("PUT {} = %d %s", st, body)
	}
	if n = getNet(t, h, id); n.Network.DenyOut != nil || !n.AllowInternetAccess {
		t.Fatalf("info after clearing = %+v", n)
	}

	// Domain rules: normalized, kept, shown back.
	st, _, body = h.do(t, "PUT", "/sandboxes/"+id+"/network", `{"allowOut":["*.Example.com.","10.0.0.1"],"denyOut":["0.0.0.0/0","bad.example.com"]}`)
	if st != 204 {
		t.Fatalf("PUT domains = %d %s", st, body)
	}
	pol = h.env.Network.Policy(id)
	if !reflect.DeepEqual(pol.Egress.AllowDomains, []string{"*.example.com"}) || !reflect.DeepEqual(pol.Egress.DenyDomains, []string{"bad.example.com"}) {
		t.Fatalf("SetPolicy got %+v", pol)
	}
	if n = getNet(t, h, id); !reflect.DeepEqual(n.Network.AllowOut, []string{"10.0.0.1", "*.example.com"}) ||
		!reflect.DeepEqual(n.Network.DenyOut, []string{"0.0.0.0/0", "bad.example.com"}) {
		t.Fatalf("info with domains = %+v", n)
	}
	for _, junk := range []string{"*.*.example.com", "exa_mple.com", "-x.example.com", "x..com"} {
		st, _, body = h.do(t, "PUT", "/sandboxes/"+id+"/network", `{"allowOut":["`+junk+`"]}`)
		assertError(t, st, body, 400, "allowOut entry")
	}
	st, _, body = h.do(t, "PUT", "/sandboxes/"+id+"/network", `{"denyOut":["10.1.2.3/99"]}`)
	assertError(t, st, body, 400, "denyOut entry")
	st, _, body = h.do(t, "PUT", "/sandboxes/"+id+"/network", `{"allowOut":`)
	assertError(t, st, body, 400, "invalid JSON")
	st, _, body = h.do(t, "PUT", "/sandboxes/inotthere/network", `{"denyOut":["0.0.0.0/0"]}`)
	assertError(t, st, body, 404, "inotthere")
}

func TestNetworkLog(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	id := createID(t, h, `{}`)
	st, _, body := h.do(t, "GET", "/sandboxes/"+id+"/network/log", "")
	if st != 200 || strings.TrimSpace(string(body)) != `{"sandboxID":"`+id+`","entries":[],"dropped":0}` {
		t.Fatalf("empty log = %d %s", st, body)
	}
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h.env.Network.SetAudit(id, []audit.Entry{
		{Time: when, Kind: audit.KindDNS, Decision: audit.Denied, Rule: "not in allowOut", Name: "denied.test", QType: "A"},
		{Time: when, Kind: audit.KindConn, Decision: audit.Allowed, Rule: "allowOut allowed.test (resolved)", Protocol: "tcp",
			Dst: netip.MustParseAddr("192.0.2.7"), Port: 443},
	})
	h.env.Network.SetDropped(id, 1234)
	st, _, body = h.do(t, "GET", "/sandboxes/"+id+"/network/log?limit=1", "")
	want := `{"sandboxID":"` + id + `","entries":[{"timestamp":"2026-01-02T03:04:05Z","kind":"connection","decision":"allowed",` +
		`"rule":"allowOut allowed.test (resolved)","protocol":"tcp","ip":"192.0.2.7","port":443}],"dropped":1234}`
	if st != 200 || strings.TrimSpace(string(body)) != want {
		t.Fatalf("log?limit=1 = %d %s\nwant %s", st, body, want)
	}
	st, _, body = h.do(t, "GET", "/sandboxes/"+id+"/network/log", "")
	if st != 200 || !strings.Contains(string(body), `"name":"denied.test","qtype":"A"`) {
		t.Fatalf("log = %d %s", st, body)
	}
	for _, bad := range []string{"0", "-1", "x", "1001"} {
		st, _, body = h.do(t, "GET", "/sandboxes/"+id+"/network/log?limit="+bad, "")
		assertError(t, st, body, 400, "limit must be an integer from 1 to 1000")
	}
	st, _, body = h.do(t, "GET", "/sandboxes/inotthere/network/log", "")
	assertError(t, st, body, 404, "inotthere")
}
