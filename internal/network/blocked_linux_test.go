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
	"strings"
	"testing"
)

// Always-blocked destinations root test: its own prefix and pool, and a
// namespace standing in for the world with
//
//	bkNode     198.51.100.202   another cluster node (public addressing)
//	bkAzure    168.63.129.16    Azure's WireServer and resolver
//	bkAlibaba  100.100.100.200  Alibaba Cloud's metadata server
const (
	bkExtNS   = "xalbk7t-out"
	bkExtIf   = "xalbk7t0"
	bkNode    = "198.51.100.202"
	bkOther   = "198.51.100.203"
	bkAzure   = "168.63.129.16"
	bkAlibaba = "100.100.100.200"
)

// This run's own prefix and pool (runnames_linux_test.go).
var (
	bkPrefix = runPrefix("bk")
	bkSubnet = runSubnet(2)
)

func newBlockedManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	cfg.Subnet, cfg.NamePrefix = netip.MustParsePrefix(bkSubnet), bkPrefix
	m, err := NewManager(testCtx(t), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	return m
}

// A sandbox with internet access, --deny-out none, a --deny-out-except and
// an allowOut that name the cluster's addresses still cannot reach them;
// the set follows SetBlockedAddrs and survives a reinstall. Azure's
// WireServer (but for DNS) and Alibaba's metadata server are closed too.
func testBlockedAddrs(t *testing.T) {
	needRoot(t)
	ctx := testCtx(t)
	out := makeOutsideNS(t, bkExtNS, bkExtIf, []string{"198.51.100.201/29", "168.63.129.1/24", "100.100.100.1/24"},
		[]string{bkNode + "/29", bkOther + "/29", bkAzure + "/24", bkAlibaba + "/24"})
	node := net.JoinHostPort(bkNode, port(listenIn(t, out, net.JoinHostPort(bkNode, "0"))))
	other := net.JoinHostPort(bkOther, port(listenIn(t, out, net.JoinHostPort(bkOther, "0"))))
	listenIn(t, out, net.JoinHostPort(bkAzure, "80"))
	listenIn(t, out, net.JoinHostPort(bkAzure, "32526"))
	listenIn(t, out, net.JoinHostPort(bkAzure, "53"))
	listenIn(t, out, net.JoinHostPort(bkAlibaba, "80"))

	all := netip.MustParsePrefix("0.0.0.0/0")
	m := newBlockedManager(t, Config{DenyOut: []netip.Prefix{}, DenyOutExcept: []netip.Prefix{all}})
	egress, err := ParseEgress([]string{bkNode, bkAzure, bkAlibaba}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := m.Setup(ctx, "bk-a", 1, Options{AllowInternet: true, Egress: egress})
	if err != nil {
		t.Fatal(err)
	}
	mustReach(t, "node before it is blocked", ep.NetNSPath, node)

	// M8: the cloud addresses are closed whatever the operator says.
	mustFail(t, "Azure WireServer :80", ep.NetNSPath, net.JoinHostPort(bkAzure, "80"))
	mustFail(t, "Azure HostGAPlugin :32526", ep.NetNSPath, net.JoinHostPort(bkAzure, "32526"))
	mustReach(t, "Azure DNS (tcp 53)", ep.NetNSPath, net.JoinHostPort(bkAzure, "53"))
	mustFail(t, "Alibaba metadata :80", ep.NetNSPath, net.JoinHostPort(bkAlibaba, "80"))

	// The cluster's addresses: blocked as soon as they are in the set,
	// open again once they leave it.
	nodeAddr, otherAddr := netip.MustParseAddr(bkNode), netip.MustParseAddr(bkOther)
	if err := m.SetBlockedAddrs([]netip.Addr{nodeAddr, nodeAddr, netip.MustParseAddr("::1")}); err != nil {
		t.Fatal(err)
	}
	wantBlocked(t, m, nodeAddr)
	mustFail(t, "blocked node with deny-out none, an exception and allowOut", ep.NetNSPath, node)
	mustReach(t, "address not in the set", ep.NetNSPath, other)
	if err := m.SetBlockedAddrs([]netip.Addr{otherAddr}); err != nil {
		t.Fatal(err)
	}
	wantBlocked(t, m, otherAddr)
	mustReach(t, "node after it left the set", ep.NetNSPath, node)
	mustFail(t, "address that joined the set", ep.NetNSPath, other)
	if err := m.SetBlockedAddrs(nil); err != nil {
		t.Fatal(err)
	}
	wantBlocked(t, m)
	mustReach(t, "empty set", ep.NetNSPath, other)

	// A daemon restart installs the table with Config.BlockedAddrs; the
	// running sandbox keeps its network and is blocked at once.
	m2, err := NewManager(ctx, Config{Subnet: netip.MustParsePrefix(bkSubnet), NamePrefix: bkPrefix, DenyOut: []netip.Prefix{},
		BlockedAddrs: []netip.Addr{nodeAddr}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close(context.Background(), false)
	if err := m2.SetPolicy(ctx, "bk-a", 1, Options{AllowInternet: true}); err != nil {
		t.Fatal(err)
	}
	wantBlocked(t, m2, nodeAddr)
	mustFail(t, "node after a restart", ep.NetNSPath, node)
	mustReach(t, "other address after a restart", ep.NetNSPath, other)

	// The ruleset: the cloud ranges and the set come before the operator's
	// list and the sandboxes' policies.
	text, err := exec.Command("nft", "list", "table", "inet", bkPrefix).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, text)
	}
	last := -1
	for _, s := range []string{
		`ip daddr 100.100.100.200 drop`,
		`ip daddr 168.63.129.16 meta l4proto != tcp meta l4proto != udp drop`,
		`ip daddr 168.63.129.16 th dport != 53 drop`,
		`ip daddr @` + BlockedSetName + ` drop`,
		`iifname vmap @` + EgressMapName,
	} {
		i := strings.Index(string(text), s)
		if i < 0 || i < last {
			t.Fatalf("ruleset lacks %q after the previous line (at %d, previous %d):\n%s", s, i, last, text)
		}
		last = i
	}
}

func wantBlocked(t *testing.T, m *Manager, want ...netip.Addr) {
	t.Helper()
	got, err := m.BlockedAddrs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("set %s = %v, want %v", BlockedSetName, got, want)
	}
}

// TestReviewNetwork runs the attack of the security review (issue 23) this file tests,
// named for the reliability report (docs/RELIABILITY.md).
func TestReviewNetwork(t *testing.T) {
	t.Run("attack/M1-cluster-addresses-always-blocked", testBlockedAddrs)
}
