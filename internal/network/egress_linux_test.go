//go:build linux

package network

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

func TestEgressRules(t *testing.T) {
	e := Egress{
		Allow: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32")},
		Deny:  []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("192.0.2.0/24")},
	}
	f := &firewall{}
	rules := f.egressRules(e)
	if len(rules) != 3 {
		t.Fatalf("%d rules, want 3", len(rules))
	}
	want := []expr.VerdictKind{expr.VerdictAccept, expr.VerdictDrop, expr.VerdictDrop}
	for i, r := range rules {
		v, ok := r[len(r)-1].(*expr.Verdict)
		if !ok || v.Kind != want[i] {
			t.Errorf("rule %d ends with %#v, want verdict %v", i, r[len(r)-1], want[i])
		}
		// the destination address compared is the prefix's network
		cmp := r[len(r)-2].(*expr.Cmp)
		p := append(e.Allow, e.Deny...)[i].Addr().As4()
		if string(cmp.Data) != string(p[:]) {
			t.Errorf("rule %d compares %v, want %v", i, cmp.Data, p)
		}
	}
	if len(f.egressRules(Egress{})) != 0 {
		t.Error("empty policy built rules")
	}
}

// Egress root test: own prefix, pool and outside namespace, so it can run
// next to other engineers' tests and daemons.
const (
	egExtNS    = "xalo9t-ext"
	egExtIf    = "xalo9t0"
	egExtHost  = "10.97.1.1"
	egExtA     = "10.97.1.2"
	egExtB     = "10.97.1.3"
	egExtPlen  = "/29"
	egExtRoute = "10.97.1.0/29"
)

// This run's own prefix and pool (runnames_linux_test.go).
var (
	egPrefix = runPrefix("eg")
	egSubnet = runSubnet(1)
)

func makeEgressOutside(t *testing.T) string {
	t.Helper()
	return makeOutsideNS(t, egExtNS, egExtIf, []string{egExtHost + egExtPlen}, []string{egExtA + egExtPlen, egExtB + egExtPlen})
}

// makeOutsideNS creates the namespace ns, joined to the host by the veth
// hostIf: the host end gets hostAddrs, the namespace's eth0 nsAddrs (each
// with its prefix length). It waits until both ends are up, removes both at
// the end of the test and returns the namespace's path.
func makeOutsideNS(t *testing.T, ns, hostIf string, hostAddrs, nsAddrs []string) string {
	t.Helper()
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	path := filepath.Join(NetNSDir, ns)
	_ = deleteLink(hostIf)
	_ = deleteNamedNetNS(path)
	if err := createNamedNetNS(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := deleteLink(hostIf); err != nil {
			t.Error(err)
		}
		if err := deleteNamedNetNS(path); err != nil {
			t.Error(err)
		}
	})
	run("link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns)
	for _, a := range hostAddrs {
		run("addr", "add", a, "dev", hostIf)
	}
	run("link", "set", hostIf, "up")
	for _, a := range nsAddrs {
		run("-n", ns, "addr", "add", a, "dev", "eth0")
	}
	run("-n", ns, "link", "set", "eth0", "up")
	run("-n", ns, "link", "set", "lo", "up")
	if err := waitOperUp(testCtx(t), netlink.LinkByName, hostIf); err != nil {
		t.Fatal(err)
	}
	nsh, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	if err := waitGuestUp(testCtx(t), nsh); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestEgressPolicy(t *testing.T) {
	needRoot(t)
	ctx := testCtx(t)
	cfg := Config{Subnet: netip.MustParsePrefix(egSubnet), NamePrefix: egPrefix,
		DenyOutExcept: []netip.Prefix{netip.MustParsePrefix(egExtRoute)}} // the stand-in outside is private
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
	ext := makeEgressOutside(t)
	la := listenIn(t, ext, net.JoinHostPort(egExtA, "0"))
	lb := listenIn(t, ext, net.JoinHostPort(egExtB, "0"))
	addrA, addrB := net.JoinHostPort(egExtA, port(la)), net.JoinHostPort(egExtB, port(lb))

	pol := func(allow, deny []string) Egress {
		e, err := ParseEgress(allow, deny)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	// allowOut one, deny the rest.
	ep, err := m.Setup(ctx, "eg-a", 1, Options{AllowInternet: true, Egress: pol([]string{egExtA}, []string{"0.0.0.0/0"})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Teardown(context.Background(), "eg-a", 1) })
	mustReach(t, "allowed A", ep.NetNSPath, addrA)
	mustFail(t, "denied B", ep.NetNSPath, addrB)
	if n, mapped, err := m.fw.egressRuleCount(ep.HostIf); err != nil || n != 2 || !mapped {
		t.Errorf("egress chain: %d rules, mapped %v, %v; want 2, true", n, mapped, err)
	}
	out, err := exec.Command("nft", "list", "table", "inet", egPrefix).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, out)
	}
	text := string(out)
	// Order in forward: always-blocked drops, then the policy map, then the
	// internet set; the sandbox chain: allow before deny.
	order := []string{
		`ip daddr 169.254.0.0/16 drop`,
		`iifname vmap @` + EgressMapName,
		`iifname @internet_ifaces accept`,
		`chain ` + egressChainName(ep.HostIf),
		`ip daddr ` + egExtA + ` accept`,
		`ip daddr 0.0.0.0/0 drop`,
	}
	last := -1
	for _, s := range order {
		i := strings.Index(text, s)
		if i < 0 || i < last {
			t.Errorf("ruleset lacks %q after the previous line (at %d, previous %d):\n%s", s, i, last, text)
			break
		}
		last = i
	}

	// denyOut one, allow the rest (live change).
	if err := m.SetPolicy(ctx, "eg-a", 1, Options{AllowInternet: true, Egress: pol(nil, []string{egExtA + "/32"})}); err != nil {
		t.Fatal(err)
	}
	mustFail(t, "denied A", ep.NetNSPath, addrA)
	mustReach(t, "allowed B", ep.NetNSPath, addrB)

	// no internet but allowOut.
	if err := m.SetPolicy(ctx, "eg-a", 1, Options{AllowInternet: false, Egress: pol([]string{egExtB}, nil)}); err != nil {
		t.Fatal(err)
	}
	mustFail(t, "A without internet", ep.NetNSPath, addrA)
	mustReach(t, "allowOut B without internet", ep.NetNSPath, addrB)

	// allowOut never opens the host or the pool.
	if err := m.SetPolicy(ctx, "eg-a", 1, Options{AllowInternet: true, Egress: pol([]string{"0.0.0.0/0"}, nil)}); err != nil {
		t.Fatal(err)
	}
	hl := listenIn(t, "", net.JoinHostPort(ep.HostIP.String(), "0"))
	mustFail(t, "host with allowOut 0.0.0.0/0", ep.NetNSPath, net.JoinHostPort(ep.HostIP.String(), port(hl)))

	// Cleared policy: internet only.
	if err := m.SetPolicy(ctx, "eg-a", 1, Options{AllowInternet: true}); err != nil {
		t.Fatal(err)
	}
	mustReach(t, "A after clear", ep.NetNSPath, addrA)
	if n, mapped, err := m.fw.egressRuleCount(ep.HostIf); err != nil || n != 0 || mapped {
		t.Errorf("after clear: %d rules, mapped %v, %v; want none", n, mapped, err)
	}
	if err := m.SetEgress(ctx, "nope", 9, pol(nil, []string{"0.0.0.0/0"})); err == nil {
		t.Error("SetEgress on a missing sandbox succeeded")
	}

	// Teardown removes the chain.
	if err := m.SetEgress(ctx, "eg-a", 1, pol(nil, []string{egExtA})); err != nil {
		t.Fatal(err)
	}
	if err := m.Teardown(ctx, "eg-a", 1); err != nil {
		t.Fatal(err)
	}
	out, _ = exec.Command("nft", "list", "table", "inet", egPrefix).CombinedOutput()
	if strings.Contains(string(out), egressChainPrefix) {
		t.Errorf("egress chain left after teardown:\n%s", out)
	}
}
