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

// relayStandIn listens on the host like the daemon's SOCKS relay and
// answers each connection with "relay <source> <original destination>
// <the name the sandbox resolved for it>".
func relayStandIn(t *testing.T, m **Manager, id string) uint16 {
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
			fmt.Fprintf(c, "relay %s %v %v %q\n", src.Addr(), dst, err, (*m).ProxyName(id, dst.Addr()))
			_ = c.Close()
		}
	}()
	p, _ := strconv.Atoi(port(l))
	return uint16(p)
}

// TestSocksSteering: a sandbox with an egressProxy has every TCP
// connection its policy lets out steered to the relay, with the name it
// resolved; what its policy denies is dropped before; the relay's port is
// closed to direct dials; without the proxy, traffic goes direct again.
func TestSocksSteering(t *testing.T) {
	needRoot(t)
	ctx := testCtx(t)
	var m *Manager
	relayPort := relayStandIn(t, &m, "id-s")
	cfg := Config{Subnet: netip.MustParsePrefix(runSubnet(10)), NamePrefix: runPrefix("sk"), DNSUpstreams: []string{dnExtDNS},
		SocksPort: relayPort, DenyOutExcept: []netip.Prefix{netip.MustParsePrefix("10.96.5.0/29")}}
	var err error
	m, err = NewManager(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	listenIn(t, ext, dnExtA+":8080")
	listenIn(t, ext, dnExtB+":443")
	ep, err := m.Setup(ctx, "id-s", 1, Options{AllowInternet: true, EgressProxy: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Teardown(context.Background(), "id-s", 1) })
	if on, err := m.fw.socksMember(ep.HostIf); err != nil || !on {
		t.Fatalf("%s in %s: %v, %v", ep.HostIf, SocksSetName, on, err)
	}
	direct := net.JoinHostPort(dnExtDNS, "53")
	if rc, addrs := resolveFrom(t, ep.NetNSPath, direct, "Allowed.Test"); rc != 0 || len(addrs) != 1 || addrs[0] != dnExtA {
		t.Fatalf("allowed.test: rcode %d, %v", rc, addrs)
	}
	for _, c := range []struct{ addr, name string }{
		{dnExtA + ":443", "allowed.test"}, {dnExtA + ":8080", "allowed.test"}, {dnExtB + ":443", ""},
	} {
		want := fmt.Sprintf("relay %s %s <nil> %q", ep.GuestIP, c.addr, c.name)
		if got := mustReach(t, c.addr, ep.NetNSPath, c.addr); got != want {
			t.Errorf("%s: %q, want %q", c.addr, got, want)
		}
	}
	// The relay's port is not open to the sandbox itself.
	mustFail(t, "relay port dialled directly", ep.NetNSPath, net.JoinHostPort(ep.HostIP.String(), strconv.Itoa(int(relayPort))))

	// The sandbox's policy still decides, on the original destination:
	// denied B is dropped, not relayed; with internet off nothing goes.
	eg, err := ParseEgress(nil, []string{dnExtB})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetPolicy(ctx, "id-s", 1, Options{AllowInternet: true, EgressProxy: true, Egress: eg}); err != nil {
		t.Fatal(err)
	}
	mustFail(t, "B denied by denyOut", ep.NetNSPath, dnExtB+":443")
	if got := mustReach(t, "A allowed", ep.NetNSPath, dnExtA+":443"); !strings.HasPrefix(got, "relay ") {
		t.Errorf("A with B denied: %q, want the relay", got)
	}
	if err := m.SetPolicy(ctx, "id-s", 1, Options{AllowInternet: false, EgressProxy: true}); err != nil {
		t.Fatal(err)
	}
	mustFail(t, "A with internet off", ep.NetNSPath, dnExtA+":443")

	out, err := exec.Command("nft", "list", "table", "inet", runPrefix("sk")).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, out)
	}
	for _, want := range []string{"set " + SocksSetName, "chain " + chainSocksPre, "chain " + chainSocksOut, "jump " + chainSocksOut,
		fmt.Sprintf("iifname @socks_ifaces meta l4proto tcp dnat ip to ip saddr & 255.255.255.253 | 0.0.0.1:%d", relayPort)} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ruleset lacks %q:\n%s", want, out)
		}
	}

	// Without the proxy, connections go direct again.
	if err := m.SetPolicy(ctx, "id-s", 1, Options{AllowInternet: true}); err != nil {
		t.Fatal(err)
	}
	if got := mustReach(t, "A direct", ep.NetNSPath, dnExtA+":443"); strings.HasPrefix(got, "relay") {
		t.Errorf("A after the proxy went: %q, want direct", got)
	}
	if m.ProxyName("id-s", netip.MustParseAddr(dnExtA)) != "" {
		t.Error("the resolved names outlive the proxy")
	}
}
