//go:build linux

package network

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/internal/approval"
)

// TestApprovalDNSHold: with a hook and domain rules, a name outside
// allowOut is held in the DNS filter until the hook answers; allowed, its
// addresses are open without another question; denied, REFUSED; a denyOut
// name is refused without asking. The stand-in internet is
// TestDomainEgress's (makeDNSOutside), the manager its own.
func TestApprovalDNSHold(t *testing.T) {
	needRoot(t)
	ctx := testCtx(t)
	broker := approval.NewBroker(approval.Options{})
	cfg := Config{Subnet: netip.MustParsePrefix(runSubnet(11)), NamePrefix: runPrefix("ad"), DNSUpstreams: []string{dnExtDNS},
		DenyOutExcept:  []netip.Prefix{netip.MustParsePrefix("10.96.5.0/29")},
		ApprovalConfig: ApprovalConfig{ApprovalQueue: 3303, Approver: broker}}
	m, err := NewManager(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	cleanupAll(t, m)
	t.Cleanup(func() {
		cleanupAll(t, m)
		if err := m.Close(context.Background(), true); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ext := makeDNSOutside(t)
	lb := listenIn(t, ext, net.JoinHostPort(dnExtB, "0"))
	e, err := ParseEgress([]string{"allowed.test"}, []string{"0.0.0.0/0", "b.x.test"})
	if err != nil {
		t.Fatal(err)
	}
	e.Hold = true
	const id = "ap-dns"
	broker.Set(id, &approval.Config{Stream: true, TimeoutMs: 2000})
	ep, err := m.Setup(ctx, id, 1, Options{AllowInternet: true, Egress: e})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Teardown(context.Background(), id, 1) })
	s := broker.Listen(id)
	defer broker.Unlisten(s)
	var mu sync.Mutex
	asked := map[string]int{}
	go func() {
		for q := range s.C {
			key := q.Protocol + " " + q.Domain + q.Address
			mu.Lock()
			asked[key]++
			mu.Unlock()
			d := "deny"
			if q.Protocol == approval.ProtocolDNS && q.Domain == "denied.test" {
				d = "allow"
			}
			_ = broker.Answer(id, q.DecisionID, approval.Decision{Decision: d})
		}
	}()
	askedOf := func(k string) int { mu.Lock(); defer mu.Unlock(); return asked[k] }
	direct := net.JoinHostPort(dnExtDNS, "53")

	if rc, addrs := resolveFrom(t, ep.NetNSPath, direct, "allowed.test"); rc != dns.RcodeSuccess || !slices.Equal(addrs, []string{dnExtA}) || askedOf("dns allowed.test") != 0 {
		t.Fatalf("allowed.test: %s %v, asked %d; want answered without asking", dns.RcodeToString[rc], addrs, askedOf("dns allowed.test"))
	}
	if rc, addrs := resolveFrom(t, ep.NetNSPath, direct, "denied.test"); rc != dns.RcodeSuccess || !slices.Equal(addrs, []string{dnExtB}) || askedOf("dns denied.test") != 1 {
		t.Fatalf("denied.test (not in allowOut, hook allows): %s %v, asked %d; want held, then answered", dns.RcodeToString[rc], addrs, askedOf("dns denied.test"))
	}
	mustReach(t, "B after the hook allowed its name", ep.NetNSPath, net.JoinHostPort(dnExtB, port(lb)))
	if n := askedOf("tcp " + dnExtB); n != 0 {
		t.Errorf("connecting to an approved name's address asked %d times, want 0", n)
	}
	if rc, _ := resolveFrom(t, ep.NetNSPath, direct, "b.x.test"); rc != dns.RcodeRefused || askedOf("dns b.x.test") != 0 {
		t.Errorf("b.x.test (denyOut): %s, asked %d; want REFUSED without asking", dns.RcodeToString[rc], askedOf("dns b.x.test"))
	}
	if rc, _ := resolveFrom(t, ep.NetNSPath, direct, "nx.test"); rc != dns.RcodeRefused || askedOf("dns nx.test") != 1 {
		t.Errorf("nx.test (hook denies): %s, asked %d; want REFUSED after asking", dns.RcodeToString[rc], askedOf("dns nx.test"))
	}
}
