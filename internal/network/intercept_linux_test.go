//go:build linux

package network

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
)

// Steering to the egress proxy, root test. Own names and ranges.
const (
	icExtNS   = "xalic8t-ext"
	icExtIf   = "xalic8t0"
	icExtHost = "10.96.9.1"
	icExtA    = "10.96.9.2" // a ruled domain's address
	icExtB    = "10.96.9.3" // another
	icExtPlen = "/29"
)

// This run's own prefix and pool (runnames_linux_test.go).
var (
	icPrefix = runPrefix("ic")
	icSubnet = runSubnet(5)
)

// proxyStandIn listens on the host like the daemon's egress proxy and
// answers each connection with "proxy <source> <original destination>".
func proxyStandIn(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			dst, err := egressproxy.OriginalDst(c)
			src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
			fmt.Fprintf(c, "proxy %s %v %v\n", src.Addr(), dst, err)
			_ = c.Close()
		}
	}()
	p, _ := strconv.Atoi(port(l))
	return uint16(p)
}

func TestInterceptSteering(t *testing.T) {
	needRoot(t)
	ctx := testCtx(t)
	proxyPort := proxyStandIn(t)
	cfg := Config{Subnet: netip.MustParsePrefix(icSubnet), NamePrefix: icPrefix, InterceptPort: proxyPort,
		DenyOutExcept: []netip.Prefix{netip.MustParsePrefix("10.96.9.0/29")}}
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
	ext := makeOutsideNS(t, icExtNS, icExtIf, []string{icExtHost + icExtPlen}, []string{icExtA + icExtPlen, icExtB + icExtPlen})
	for _, a := range []string{icExtA + ":443", icExtA + ":80", icExtA + ":8443", icExtB + ":443"} {
		listenIn(t, ext, a)
	}
	a := setup(t, m, "ic-a", 1, true) // has rules
	b := setup(t, m, "ic-b", 2, true) // has none

	// Before anything is steered, everything goes out.
	if got := mustReach(t, "A:443 before", a.NetNSPath, icExtA+":443"); strings.HasPrefix(got, "proxy") {
		t.Fatalf("A:443 before steering reached the proxy: %s", got)
	}
	if err := m.Intercept("ic-a", 1, []netip.Addr{netip.MustParseAddr(icExtA)}, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := m.fw.interceptedAddrs(a.HostIf); err != nil || len(got) != 1 || got[0].String() != icExtA {
		t.Fatalf("steered addresses %v, %v", got, err)
	}
	for _, p := range []string{"443", "80"} {
		want := fmt.Sprintf("proxy %s %s:%s <nil>", a.GuestIP, icExtA, p)
		if got := mustReach(t, "A:"+p+" steered", a.NetNSPath, net.JoinHostPort(icExtA, p)); got != want {
			t.Errorf("A:%s from the ruled sandbox: %q, want %q", p, got, want)
		}
	}
	// Other ports, other addresses and other sandboxes are not steered.
	for _, c := range []struct{ what, path, addr string }{
		{"A:8443", a.NetNSPath, icExtA + ":8443"},
		{"B:443", a.NetNSPath, icExtB + ":443"},
		{"A:443 from the sandbox without rules", b.NetNSPath, icExtA + ":443"},
	} {
		if got := mustReach(t, c.what, c.path, c.addr); strings.HasPrefix(got, "proxy") {
			t.Errorf("%s reached the proxy: %s", c.what, got)
		}
	}
	// The proxy port itself is closed to sandboxes: only steered
	// connections pass input.
	mustFail(t, "proxy port dialled directly", a.NetNSPath, net.JoinHostPort(a.HostIP.String(), strconv.Itoa(int(proxyPort))))

	out, err := exec.Command("nft", "list", "table", "inet", icPrefix).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, out)
	}
	for _, want := range []string{"set " + InterceptSetName, "ct status dnat", fmt.Sprintf("tcp dport 443 iifname . ip daddr @intercept_addrs dnat ip to ip saddr & 255.255.255.253 | 0.0.0.1:%d", proxyPort)} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ruleset lacks %q:\n%s", want, out)
		}
	}

	// Teardown forgets the sandbox's steering.
	if err := m.Teardown(ctx, "ic-a", 1); err != nil {
		t.Fatal(err)
	}
	if got, err := m.fw.interceptedAddrs(a.HostIf); err != nil || len(got) != 0 {
		t.Fatalf("steered addresses after teardown %v, %v", got, err)
	}
}

// The DNS filter steers what a ruled domain resolves to, and only that.
func TestInterceptByDNS(t *testing.T) {
	needRoot(t)
	ctx := testCtx(t)
	proxyPort := proxyStandIn(t)
	cfg := Config{Subnet: netip.MustParsePrefix(runSubnet(8)), NamePrefix: runPrefix("id"), DNSUpstreams: []string{dnExtDNS},
		InterceptPort: proxyPort, DenyOutExcept: []netip.Prefix{netip.MustParsePrefix("10.96.5.0/29")}}
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
	listenIn(t, ext, dnExtA+":443")
	listenIn(t, ext, dnExtB+":443")
	ep, err := m.Setup(ctx, "id-a", 1, Options{AllowInternet: true, Intercept: []string{"allowed.test"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Teardown(context.Background(), "id-a", 1) })
	direct := net.JoinHostPort(dnExtDNS, "53")
	if got := mustReach(t, "A before resolving", ep.NetNSPath, dnExtA+":443"); strings.HasPrefix(got, "proxy") {
		t.Fatalf("A:443 before resolving the ruled name reached the proxy: %s", got)
	}
	if rc, addrs := resolveFrom(t, ep.NetNSPath, direct, "Allowed.Test"); rc != 0 || len(addrs) != 1 || addrs[0] != dnExtA {
		t.Fatalf("allowed.test: rcode %d, %v", rc, addrs)
	}
	want := fmt.Sprintf("proxy %s %s:443 <nil>", ep.GuestIP, dnExtA)
	if got := mustReach(t, "A after resolving the ruled name", ep.NetNSPath, dnExtA+":443"); got != want {
		t.Errorf("A:443 after resolving allowed.test: %q, want %q", got, want)
	}
	if rc, addrs := resolveFrom(t, ep.NetNSPath, direct, "denied.test"); rc != 0 || len(addrs) != 1 {
		t.Fatalf("denied.test (internet on, no policy): rcode %d, %v", rc, addrs)
	}
	if got := mustReach(t, "B after resolving another name", ep.NetNSPath, dnExtB+":443"); strings.HasPrefix(got, "proxy") {
		t.Errorf("B:443 (not a ruled name) reached the proxy: %s", got)
	}
	// The rules go: the steering goes with them.
	if err := m.SetPolicy(ctx, "id-a", 1, Options{AllowInternet: true}); err != nil {
		t.Fatal(err)
	}
	if got := mustReach(t, "A after the rules went", ep.NetNSPath, dnExtA+":443"); strings.HasPrefix(got, "proxy") {
		t.Errorf("A:443 still steered after the rules went: %s", got)
	}
}
