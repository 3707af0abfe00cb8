//go:build linux

package network

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
)

// Operator deny list root test: its own prefix, pool, NFLOG group and a
// namespace standing in for the host's LAN and the internet at once:
//
//	doMirror  10.95.1.2    a private address the operator opens (--deny-out-except)
//	doLAN     10.95.1.3    a private address nobody opens (a database, a node's API)
//	doPublic  203.0.113.2  a public address (TEST-NET-3, in no default range)
const (
	doExtNS     = "xaldo5t-lan"
	doExtIf     = "xaldo5t0"
	doLANHost   = "10.95.1.1/29"
	doMirror    = "10.95.1.2"
	doLAN       = "10.95.1.3"
	doLANPlen   = "/29"
	doPubHost   = "203.0.113.1/29"
	doPublic    = "203.0.113.2"
	doPubPlen   = "/29"
	doAuditGrp  = 40705
	doDenyRange = "10.0.0.0/8" // the default range doLAN is in
)

// This run's own prefix and pool (runnames_linux_test.go).
var (
	doPrefix = runPrefix("do")
	doSubnet = runSubnet(3)
)

// makeLAN creates the namespace with the three addresses and returns its
// path.
func makeLAN(t *testing.T) string {
	t.Helper()
	return makeOutsideNS(t, doExtNS, doExtIf, []string{doLANHost, doPubHost},
		[]string{doMirror + doLANPlen, doLAN + doLANPlen, doPublic + doPubPlen})
}

// newDenyOutManager (re)installs this test's table with cfg's deny list.
func newDenyOutManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	cfg.Subnet, cfg.NamePrefix, cfg.AuditGroup = netip.MustParsePrefix(doSubnet), doPrefix, doAuditGrp
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

func TestOperatorDenyOut(t *testing.T) {
	needRoot(t)
	ctx := testCtx(t)
	lan := makeLAN(t)
	lm := listenIn(t, lan, net.JoinHostPort(doMirror, "0"))
	ll := listenIn(t, lan, net.JoinHostPort(doLAN, "0"))
	lp := listenIn(t, lan, net.JoinHostPort(doPublic, "0"))
	mirror, lanDB, public := net.JoinHostPort(doMirror, port(lm)), net.JoinHostPort(doLAN, port(ll)), net.JoinHostPort(doPublic, port(lp))

	// The defaults (Config.DenyOut nil) with the mirror carved out, and the
	// LAN address as the sandboxes' resolver (DNS to it passes).
	m := newDenyOutManager(t, Config{
		DenyOutExcept: []netip.Prefix{netip.MustParsePrefix(doMirror + "/32")},
		Resolvers:     []netip.Addr{netip.MustParseAddr(doLAN)},
	})
	pol := func(allow, deny []string) Egress {
		e, err := ParseEgress(allow, deny)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}

	// A sandbox with internet access: the internet and the mirror, never the LAN.
	ep, err := m.Setup(ctx, "do-a", 1, Options{AllowInternet: true})
	if err != nil {
		t.Fatal(err)
	}
	mustReach(t, "public address", ep.NetNSPath, public)
	mustReach(t, "mirror (--deny-out-except)", ep.NetNSPath, mirror)
	mustFail(t, "LAN address (default deny list)", ep.NetNSPath, lanDB)

	// Its resolver at a private address: port 53 passes, nothing else.
	listenIn(t, lan, net.JoinHostPort(doLAN, "53"))
	mustReach(t, "resolver port 53", ep.NetNSPath, net.JoinHostPort(doLAN, "53"))

	// allowOut cannot open it: the policy is accepted, the LAN stays closed,
	// and the sandbox's audit log says why.
	if err := m.SetPolicy(ctx, "do-a", 1, Options{AllowInternet: true, Egress: pol([]string{doLAN, doPublic}, []string{"0.0.0.0/0"})}); err != nil {
		t.Fatalf("SetPolicy with allowOut into the deny list: %v (it must be accepted)", err)
	}
	mustFail(t, "LAN address with allowOut", ep.NetNSPath, lanDB)
	mustReach(t, "public address with allowOut", ep.NetNSPath, public)
	// The exception only lifts the operator's deny: the sandbox's own
	// denyOut 0.0.0.0/0 still closes the mirror.
	mustFail(t, "mirror under the sandbox's denyOut 0.0.0.0/0", ep.NetNSPath, mirror)

	// Internet off: the mirror needs the sandbox's allowOut, like any address.
	if err := m.SetPolicy(ctx, "do-a", 1, Options{AllowInternet: false}); err != nil {
		t.Fatal(err)
	}
	mustFail(t, "mirror without internet", ep.NetNSPath, mirror)
	if err := m.SetPolicy(ctx, "do-a", 1, Options{AllowInternet: false, Egress: pol([]string{doMirror}, nil)}); err != nil {
		t.Fatal(err)
	}
	mustReach(t, "mirror with allowOut, internet off", ep.NetNSPath, mirror)

	// The audit log: the note at SetPolicy, the dropped connection with the
	// operator's range as its rule.
	want := map[string]bool{
		"policy " + audit.Denied + " allowOut " + doLAN + " does not open " + denyOutRulePrefix + doDenyRange: false,
		"connection " + audit.Denied + " " + denyOutRulePrefix + doDenyRange + " " + doLAN:                    false,
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, e := range m.EgressLog("do-a", 0) {
			k := e.Kind + " " + e.Decision + " " + e.Rule
			if e.Kind == audit.KindConn {
				k += " " + e.Dst.String()
			}
			if _, ok := want[k]; ok {
				want[k] = true
			}
		}
		missing := []string{}
		for k, seen := range want {
			if !seen {
				missing = append(missing, k)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit log lacks %q; has %+v", missing, m.EgressLog("do-a", 0))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// allowOut 0.0.0.0/0 only notes; the public address is not in it.
	for _, e := range m.EgressLog("do-a", 0) {
		if e.Kind == audit.KindPolicy && strings.Contains(e.Rule, doPublic) {
			t.Errorf("policy note for an allowOut outside the deny list: %+v", e)
		}
	}

	// The same at create time (Setup).
	epB, err := m.Setup(ctx, "do-b", 2, Options{AllowInternet: true, Egress: pol([]string{doLAN + "/32"}, nil)})
	if err != nil {
		t.Fatalf("Setup with allowOut into the deny list: %v (it must be accepted)", err)
	}
	mustFail(t, "LAN address with allowOut at Setup", epB.NetNSPath, lanDB)
	if es := m.EgressLog("do-b", 0); len(es) == 0 || es[0].Kind != audit.KindPolicy ||
		es[0].Rule != "allowOut "+doLAN+" does not open "+denyOutRulePrefix+doDenyRange {
		t.Errorf("Setup's audit log starts with %+v, want the policy note", es)
	}
	// A daemon restart sets the same policy again: the note is not repeated.
	if err := m.SetPolicy(ctx, "do-b", 2, Options{AllowInternet: true, Egress: pol([]string{doLAN + "/32"}, nil)}); err != nil {
		t.Fatalf("SetPolicy again: %v", err)
	}
	notes := 0
	for _, e := range m.EgressLog("do-b", 0) {
		if e.Kind == audit.KindPolicy {
			notes++
		}
	}
	if notes != 1 {
		t.Errorf("policy notes after the same policy was set twice: %d, want 1: %+v", notes, m.EgressLog("do-b", 0))
	}

	// The ruleset: the jump after the always-blocked ranges and before the
	// sandbox policies; in deny_out resolvers, exceptions, then drops.
	out, err := exec.Command("nft", "list", "table", "inet", doPrefix).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, out)
	}
	text := string(out)
	last := -1
	for _, s := range []string{
		`ip daddr 240.0.0.0/4 drop`,
		`jump ` + chainDenyOut,
		`iifname vmap @` + EgressMapName,
		`chain ` + chainDenyOut,
		`ip daddr ` + doLAN + ` udp dport 53 return`,
		`ip daddr ` + doMirror + ` return`,
		`ip daddr 10.0.0.0/8 drop`,
		`ip daddr 198.18.0.0/15 drop`,
	} {
		i := strings.Index(text, s)
		if i < 0 || i < last {
			t.Fatalf("ruleset lacks %q after the previous line (at %d, previous %d):\n%s", s, i, last, text)
		}
		last = i
	}

	// --deny-out none: the LAN is reachable again (after a daemon restart
	// with the new list the running sandbox keeps its network).
	m2, err := NewManager(ctx, Config{Subnet: netip.MustParsePrefix(doSubnet), NamePrefix: doPrefix, DenyOut: []netip.Prefix{}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close(context.Background(), false)
	if err := m2.SetPolicy(ctx, "do-a", 1, Options{AllowInternet: true}); err != nil {
		t.Fatal(err)
	}
	mustReach(t, "LAN address with --deny-out none", ep.NetNSPath, lanDB)
	if out, _ := exec.Command("nft", "list", "table", "inet", doPrefix).CombinedOutput(); strings.Contains(string(out), chainDenyOut) {
		t.Errorf("empty deny list still installs %s:\n%s", chainDenyOut, out)
	}
}
