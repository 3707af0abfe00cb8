//go:build linux

package network

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/internal/audit"
)

// DNS-aware egress root test. Own names and ranges, so it runs next to
// daemons.
const (
	dnExtNS   = "xaldn4t-ext"
	dnExtIf   = "xaldn4t0"
	dnExtHost = "10.96.5.1"
	dnExtA    = "10.96.5.2" // allowed.test, b.x.test → B
	dnExtB    = "10.96.5.3"
	dnExtDNS  = "10.96.5.4"
	dnExtPlen = "/29"
	dnGroup   = 40704 // NFLOG group of this test's audit rules
)

// This run's own prefix and pool (runnames_linux_test.go).
var (
	dnPrefix = runPrefix("dn")
	dnSubnet = runSubnet(4)
)

// makeDNSOutside creates the stand-in internet: a namespace with servers on
// A and B and a resolver on dnExtDNS:53.
func makeDNSOutside(t *testing.T) string {
	t.Helper()
	path := makeOutsideNS(t, dnExtNS, dnExtIf, []string{dnExtHost + dnExtPlen},
		[]string{dnExtA + dnExtPlen, dnExtB + dnExtPlen, dnExtDNS + dnExtPlen})

	var pc net.PacketConn
	if err := inNS(path, func() (err error) {
		pc, err = net.ListenPacket("udp4", net.JoinHostPort(dnExtDNS, "53"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	answers := map[string]string{"allowed.test.": dnExtA, "denied.test.": dnExtB, "b.x.test.": dnExtB}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg).SetReply(r)
		if ip, ok := answers[strings.ToLower(r.Question[0].Name)]; ok {
			rr, _ := dns.NewRR(r.Question[0].Name + " 60 IN A " + ip)
			m.Answer = append(m.Answer, rr)
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return path
}

// resolveFrom asks server for name's A record from inside the namespace.
func resolveFrom(t *testing.T, path, server, name string) (rcode int, addrs []string) {
	t.Helper()
	var r *dns.Msg
	err := inNS(path, func() (err error) {
		c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
		r, _, err = c.Exchange(new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA), server)
		return err
	})
	if err != nil {
		t.Fatalf("resolving %s via %s: %v", name, server, err)
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			addrs = append(addrs, a.A.String())
		}
	}
	return r.Rcode, addrs
}

func TestDomainEgress(t *testing.T) {
	needRoot(t)
	ctx := testCtx(t)
	cfg := Config{Subnet: netip.MustParsePrefix(dnSubnet), NamePrefix: dnPrefix, DNSUpstreams: []string{dnExtDNS}, AuditGroup: dnGroup,
		DenyOutExcept: []netip.Prefix{netip.MustParsePrefix("10.96.5.0/29")}} // the stand-in outside is private
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
	la := listenIn(t, ext, net.JoinHostPort(dnExtA, "0"))
	lb := listenIn(t, ext, net.JoinHostPort(dnExtB, "0"))
	addrA, addrB := net.JoinHostPort(dnExtA, port(la)), net.JoinHostPort(dnExtB, port(lb))
	pol := func(allow, deny []string) Egress {
		e, err := ParseEgress(allow, deny)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	// Whatever resolver the sandbox asks, the query reaches the filter.
	const anyResolver = "192.0.2.53:53"
	direct := net.JoinHostPort(dnExtDNS, "53")

	ep, err := m.Setup(ctx, "dn-a", 1, Options{AllowInternet: true,
		Egress: pol([]string{"allowed.test", "*.x.test"}, []string{"0.0.0.0/0"})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Teardown(context.Background(), "dn-a", 1) })

	mustFail(t, "A before resolving", ep.NetNSPath, addrA)
	if rc, addrs := resolveFrom(t, ep.NetNSPath, anyResolver, "allowed.test"); rc != dns.RcodeSuccess || !slices.Equal(addrs, []string{dnExtA}) {
		t.Fatalf("allowed.test: rcode %s, %v; want %s", dns.RcodeToString[rc], addrs, dnExtA)
	}
	mustReach(t, "A after resolving allowed.test", ep.NetNSPath, addrA)
	mustFail(t, "B by address", ep.NetNSPath, addrB)
	if rc, _ := resolveFrom(t, ep.NetNSPath, direct, "denied.test"); rc != dns.RcodeRefused {
		t.Errorf("denied.test: rcode %s, want REFUSED", dns.RcodeToString[rc])
	}
	mustFail(t, "B after denied.test", ep.NetNSPath, addrB)
	if rc, addrs := resolveFrom(t, ep.NetNSPath, direct, "b.x.test"); rc != dns.RcodeSuccess || !slices.Equal(addrs, []string{dnExtB}) {
		t.Fatalf("b.x.test (wildcard): rcode %s, %v", dns.RcodeToString[rc], addrs)
	}
	mustReach(t, "B after resolving b.x.test", ep.NetNSPath, addrB)
	learned, err := m.fw.learnedAddrs(ep.HostIf)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(learned, netip.Addr.Compare)
	if got := addrStrings(learned); got != dnExtA+","+dnExtB {
		t.Errorf("learned %s", got)
	}
	// The sandbox still reaches no host service besides DNS.
	hl := listenIn(t, "", net.JoinHostPort(ep.HostIP.String(), "0"))
	mustFail(t, "host TCP port", ep.NetNSPath, net.JoinHostPort(ep.HostIP.String(), port(hl)))

	out, err := exec.Command("nft", "list", "table", "inet", dnPrefix).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, out)
	}
	for _, want := range []string{
		"fib daddr . iif type local",
		"udp dport 53 dnat ip to ip saddr & 255.255.255.253 | 0.0.0.1:53", // (saddr & ~3) | 1
		"set " + learnedSetPrefix + ep.HostIf,
		"ip daddr @" + learnedSetPrefix + ep.HostIf + " accept",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ruleset lacks %q:\n%s", want, out)
		}
	}

	// Live change: the wildcard goes, learned addresses are forgotten.
	if err := m.SetPolicy(ctx, "dn-a", 1, Options{AllowInternet: true, Egress: pol([]string{"allowed.test"}, []string{"0.0.0.0/0"})}); err != nil {
		t.Fatal(err)
	}
	mustFail(t, "B after the change", ep.NetNSPath, addrB)
	if rc, _ := resolveFrom(t, ep.NetNSPath, direct, "b.x.test"); rc != dns.RcodeRefused {
		t.Errorf("b.x.test after the change: rcode %s, want REFUSED", dns.RcodeToString[rc])
	}
	resolveFrom(t, ep.NetNSPath, direct, "allowed.test")
	mustReach(t, "A after the change", ep.NetNSPath, addrA)

	log := m.EgressLog("dn-a", 0)
	var saw []string
	for _, e := range log {
		if e.Kind == audit.KindDNS {
			saw = append(saw, e.Name+"="+e.Decision)
		}
	}
	if want := "allowed.test=allowed,denied.test=denied,b.x.test=allowed,b.x.test=denied,allowed.test=allowed"; strings.Join(saw, ",") != want {
		t.Errorf("dns audit %s, want %s", strings.Join(saw, ","), want)
	}
	// Connection attempts, with the rule that decided (NFLOG is
	// asynchronous: wait a little for the last ones).
	wantConn := []string{
		"tcp " + addrA + " denied denyOut 0.0.0.0/0",
		"tcp " + addrA + " allowed allowOut allowed.test (resolved)",
		"tcp " + addrB + " denied denyOut 0.0.0.0/0",
		"tcp " + addrB + " allowed allowOut b.x.test (resolved)",
		"tcp " + net.JoinHostPort(ep.HostIP.String(), port(hl)) + " denied host",
	}
	var conns []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		conns = conns[:0]
		for _, e := range m.EgressLog("dn-a", 0) {
			if e.Kind == audit.KindConn {
				conns = append(conns, e.Protocol+" "+net.JoinHostPort(e.Dst.String(), strconv.Itoa(int(e.Port)))+" "+e.Decision+" "+e.Rule)
			}
		}
		missing := slices.DeleteFunc(slices.Clone(wantConn), func(w string) bool { return slices.Contains(conns, w) })
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("connection audit lacks %q; has:\n%s", missing, strings.Join(conns, "\n"))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := len(m.EgressLog("dn-a", 3)); got != 3 {
		t.Errorf("EgressLog limit 3 gave %d entries", got)
	}

	// Without domain rules the sandbox's DNS goes where it was sent.
	if err := m.SetPolicy(ctx, "dn-a", 1, Options{AllowInternet: true}); err != nil {
		t.Fatal(err)
	}
	if rc, addrs := resolveFrom(t, ep.NetNSPath, direct, "denied.test"); rc != dns.RcodeSuccess || len(addrs) != 1 {
		t.Errorf("denied.test without a policy: rcode %s %v", dns.RcodeToString[rc], addrs)
	}
	if m.dns.Running("dn-a") {
		t.Error("the filter still runs without domain rules")
	}
	if _, err := m.fw.learnedAddrs(ep.HostIf); err == nil {
		t.Error("the learned set outlived the domain rules")
	}

	// Teardown stops the filter and removes the set.
	if err := m.SetPolicy(ctx, "dn-a", 1, Options{AllowInternet: true, Egress: pol([]string{"allowed.test"}, nil)}); err != nil {
		t.Fatal(err)
	}
	if err := m.Teardown(ctx, "dn-a", 1); err != nil {
		t.Fatal(err)
	}
	if m.dns.Running("dn-a") {
		t.Error("the filter survived teardown")
	}
	out, _ = exec.Command("nft", "list", "table", "inet", dnPrefix).CombinedOutput()
	if strings.Contains(string(out), learnedSetPrefix) {
		t.Errorf("learned set left after teardown:\n%s", out)
	}
}

func addrStrings(as []netip.Addr) string {
	var s []string
	for _, a := range as {
		s = append(s, a.String())
	}
	return strings.Join(s, ",")
}
