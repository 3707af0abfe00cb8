//go:build linux

package network

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	xipv4 "golang.org/x/net/ipv4"
)

// Tests use their own prefix, table and pool; they never touch a daemon's.
const (
	// An "outside world" the tests build themselves: a netns reached through
	// a veth whose name does not carry the sandbox prefix.
	extNS     = "xaltest-ext"
	extHostIf = "xaltest0"
	extHostIP = "10.98.0.1"
	extIP     = "10.98.0.2"
)

// This run's own prefix and pool (runnames_linux_test.go).
var (
	testPrefix = runPrefix("mg")
	testSubnet = runSubnet(0)
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, veths and nftables tables")
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newTestManager removes leftovers of earlier runs, creates a Manager and
// registers cleanup of its table and namespaces.
func newTestManager(t *testing.T) *Manager {
	t.Helper()
	needRoot(t)
	ctx := testCtx(t)
	// The stand-in outside is private: carve it out of the operator deny
	// list (denyout_linux_test.go tests the list itself).
	cfg := Config{Subnet: netip.MustParsePrefix(testSubnet), NamePrefix: testPrefix,
		DenyOutExcept: []netip.Prefix{netip.MustParsePrefix(extIP + "/32")}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := NewManager(ctx, cfg, log)
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	cleanupAll(t, m)
	t.Cleanup(func() {
		cleanupAll(t, m)
		if err := m.Close(context.Background(), true); err != nil {
			t.Errorf("Close: %v", err)
		}
		if out, _ := exec.Command("nft", "list", "table", "inet", testPrefix).CombinedOutput(); !strings.Contains(string(out), "No such file") {
			t.Errorf("table inet %s still present: %s", testPrefix, out)
		}
	})
	return m
}

// cleanupAll tears down every test namespace (slot unknown).
func cleanupAll(t *testing.T, m *Manager) {
	t.Helper()
	ids, err := m.ListNamespaces()
	if err != nil {
		t.Fatalf("ListNamespaces: %v", err)
	}
	for _, id := range ids {
		if err := m.Teardown(context.Background(), id, -1); err != nil {
			t.Errorf("Teardown(%s): %v", id, err)
		}
	}
}

func setup(t *testing.T, m *Manager, id string, slot int, internet bool) *Endpoint {
	t.Helper()
	ep, err := m.Setup(testCtx(t), id, slot, Options{AllowInternet: internet})
	if err != nil {
		t.Fatalf("Setup(%s, %d): %v", id, slot, err)
	}
	t.Cleanup(func() {
		if err := m.Teardown(context.Background(), id, slot); err != nil {
			t.Errorf("Teardown(%s): %v", id, err)
		}
	})
	return ep
}

// inNS runs fn on an OS thread switched into the namespace at path.
func inNS(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := netns.GetFromPath(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, err) // thread stays locked and is discarded
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// echoServer answers every connection with its remote address and closes.
func echoServer(t *testing.T, l net.Listener) {
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s\n", c.RemoteAddr())
			c.Close()
		}
	}()
}

// listenIn listens on addr inside the namespace at path ("" = host).
func listenIn(t *testing.T, path, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	listen := func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	}
	var err error
	if path == "" {
		err = listen()
	} else {
		err = inNS(path, listen)
	}
	if err != nil {
		t.Fatalf("listen %s in %q: %v", addr, path, err)
	}
	echoServer(t, l)
	return l
}

// dialFrom connects to addr from the namespace at path ("" = host) and
// returns what the server said (its view of our address).
func dialFrom(path, addr string) (string, error) {
	var c net.Conn
	dial := func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 700*time.Millisecond)
		return err
	}
	var err error
	if path == "" {
		err = dial()
	} else {
		err = inNS(path, dial)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading from %s: %w", addr, err)
	}
	return strings.TrimSpace(line), nil
}

// pingFrom sends one ICMP echo to dst from the namespace at path ("" =
// host) and waits briefly for the reply.
func pingFrom(path string, dst netip.Addr) error {
	var c *icmp.PacketConn
	open := func() (err error) {
		c, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}
	var err error
	if path == "" {
		err = open()
	} else {
		err = inNS(path, open)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	id := os.Getpid() & 0xffff
	msg := icmp.Message{Type: xipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: 1, Data: []byte("airlock")}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return err
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	buf := make([]byte, 1500)
	for {
		_ = c.SetReadDeadline(deadline)
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return err
		}
		rm, err := icmp.ParseMessage(1, buf[:n])
		if err != nil {
			continue
		}
		if e, ok := rm.Body.(*icmp.Echo); ok && rm.Type == xipv4.ICMPTypeEchoReply && e.ID == id &&
			from.String() == dst.String() {
			return nil
		}
	}
}

func port(l net.Listener) string {
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

func mustFail(t *testing.T, what, path, addr string) {
	t.Helper()
	start := time.Now()
	if got, err := dialFrom(path, addr); err == nil {
		t.Errorf("%s: connecting to %s succeeded (server saw %s), want failure", what, addr, got)
	} else {
		t.Logf("%s: blocked after %v: %v", what, time.Since(start).Round(time.Millisecond), err)
	}
}

func mustReach(t *testing.T, what, path, addr string) string {
	t.Helper()
	got, err := dialFrom(path, addr)
	if err != nil {
		t.Fatalf("%s: connecting to %s: %v", what, addr, err)
	}
	return got
}

func TestIsolation(t *testing.T) {
	m := newTestManager(t)
	a := setup(t, m, "a", 1, true) // internet allowed: must still not reach host or B
	b := setup(t, m, "b", 2, false)

	hostL := listenIn(t, "", "0.0.0.0:0")
	hp := port(hostL)
	// Control: the host listener answers on both gateway addresses.
	mustReach(t, "host to its own gateway A", "", net.JoinHostPort(a.HostIP.String(), hp))
	mustReach(t, "host to its own gateway B", "", net.JoinHostPort(b.HostIP.String(), hp))

	mustFail(t, "A to host via its gateway", a.NetNSPath, net.JoinHostPort(a.HostIP.String(), hp))
	mustFail(t, "A to host via B's gateway", a.NetNSPath, net.JoinHostPort(b.HostIP.String(), hp))
	mustFail(t, "B to host via its gateway", b.NetNSPath, net.JoinHostPort(b.HostIP.String(), hp))

	bL := listenIn(t, b.NetNSPath, net.JoinHostPort(b.GuestIP.String(), "0"))
	bAddr := net.JoinHostPort(b.GuestIP.String(), port(bL))
	// The daemon→agent path works from the host...
	if got := mustReach(t, "host to B's agent", "", bAddr); !strings.HasPrefix(got, b.HostIP.String()+":") {
		t.Errorf("B saw the host as %s, want %s", got, b.HostIP)
	}
	// ...but A cannot reach B.
	mustFail(t, "A to B", a.NetNSPath, bAddr)

	aL := listenIn(t, a.NetNSPath, net.JoinHostPort(a.GuestIP.String(), "0"))
	aAddr := net.JoinHostPort(a.GuestIP.String(), port(aL))
	mustReach(t, "host to A's agent", "", aAddr)
	mustFail(t, "B to A", b.NetNSPath, aAddr)

	// ICMP: the host answers pings to a sandbox, a sandbox gets no answer
	// from any host address.
	if err := pingFrom("", a.GuestIP); err != nil {
		t.Errorf("host ping A: %v", err)
	}
	if err := pingFrom(a.NetNSPath, a.HostIP); err == nil {
		t.Error("A got an answer pinging its gateway")
	}
	if err := pingFrom(a.NetNSPath, b.GuestIP); err == nil {
		t.Error("A got an answer pinging B")
	}

	// Loopback inside a sandbox is its own, not the host's.
	mustFail(t, "A to 127.0.0.1", a.NetNSPath, net.JoinHostPort("127.0.0.1", hp))
}

// makeOutside builds a namespace standing in for the internet, reachable
// from the host through a veth that is not a sandbox interface.
func makeOutside(t *testing.T) string {
	t.Helper()
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	extPath := filepath.Join(NetNSDir, extNS)
	_ = deleteLink(extHostIf)
	_ = deleteNamedNetNS(extPath)
	// Not `ip netns add`: that also turns /run/netns into a shared mount.
	if err := createNamedNetNS(extNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := deleteLink(extHostIf); err != nil {
			t.Error(err)
		}
		if err := deleteNamedNetNS(extPath); err != nil {
			t.Error(err)
		}
	})
	run("link", "add", extHostIf, "type", "veth", "peer", "name", "eth0", "netns", extNS)
	run("addr", "add", extHostIP+"/30", "dev", extHostIf)
	run("link", "set", extHostIf, "up")
	run("-n", extNS, "addr", "add", extIP+"/30", "dev", "eth0")
	run("-n", extNS, "link", "set", "eth0", "up")
	run("-n", extNS, "link", "set", "lo", "up")
	if err := waitOperUp(testCtx(t), netlink.LinkByName, extHostIf); err != nil {
		t.Fatal(err)
	}
	nsh, err := netns.GetFromName(extNS)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	if err := waitGuestUp(testCtx(t), nsh); err != nil {
		t.Fatal(err)
	}
	return extPath
}

func TestInternetAccess(t *testing.T) {
	m := newTestManager(t)
	ext := makeOutside(t)
	a := setup(t, m, "inet-a", 4, true)
	b := setup(t, m, "inet-b", 5, false)

	extL := listenIn(t, ext, net.JoinHostPort(extIP, "0"))
	extAddr := net.JoinHostPort(extIP, port(extL))

	// A goes out, masqueraded behind the outgoing interface's address.
	got := mustReach(t, "A to outside", a.NetNSPath, extAddr)
	if !strings.HasPrefix(got, extHostIP+":") {
		t.Errorf("outside saw A as %s, want masqueraded %s", got, extHostIP)
	}
	mustFail(t, "B (no internet) to outside", b.NetNSPath, extAddr)

	// The outside cannot open connections into a sandbox.
	aL := listenIn(t, a.NetNSPath, net.JoinHostPort(a.GuestIP.String(), "0"))
	// ext has no route to the pool; give it one for this check only.
	if out, err := exec.Command("ip", "-n", extNS, "route", "add", testSubnet, "via", extHostIP).CombinedOutput(); err != nil {
		t.Fatalf("route in ext: %v: %s", err, out)
	}
	mustFail(t, "outside to A", ext, net.JoinHostPort(a.GuestIP.String(), port(aL)))

	ctx := testCtx(t)
	if err := m.SetInternet(ctx, "inet-a", 4, false); err != nil {
		t.Fatal(err)
	}
	mustFail(t, "A after SetInternet(false)", a.NetNSPath, extAddr)
	if ok, err := m.InternetAllowed(4); err != nil || ok {
		t.Errorf("InternetAllowed(4) = %v, %v; want false", ok, err)
	}
	if err := m.SetInternet(ctx, "inet-b", 5, true); err != nil {
		t.Fatal(err)
	}
	mustReach(t, "B after SetInternet(true)", b.NetNSPath, extAddr)
	// Idempotent in both directions.
	if err := m.SetInternet(ctx, "inet-b", 5, true); err != nil {
		t.Errorf("second SetInternet(true): %v", err)
	}
	if err := m.SetInternet(ctx, "inet-a", 4, false); err != nil {
		t.Errorf("second SetInternet(false): %v", err)
	}
	if err := m.SetInternet(ctx, "nope", 9, true); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetInternet on a missing sandbox: %v, want ErrNotFound", err)
	}
}

func setMembers(t *testing.T) []string {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tbl := &nftables.Table{Family: nftables.TableFamilyINet, Name: testPrefix}
	s, err := c.GetSetByName(tbl, InternetSetName)
	if err != nil {
		t.Fatalf("GetSetByName: %v", err)
	}
	if s.KeyType.Name != nftables.TypeIFName.Name {
		t.Errorf("set key type %q, want ifname", s.KeyType.Name)
	}
	elems, err := c.GetSetElements(s)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range elems {
		names = append(names, strings.TrimRight(string(e.Key), "\x00"))
	}
	sort.Strings(names)
	return names
}

func TestRuleset(t *testing.T) {
	m := newTestManager(t)
	a := setup(t, m, "rs-a", 7, true)
	b := setup(t, m, "rs-b", 8, false)
	if got := setMembers(t); !slices.Equal(got, []string{a.HostIf}) {
		t.Errorf("internet set = %v, want [%s]", got, a.HostIf)
	}
	if slices.Contains(setMembers(t), b.HostIf) {
		t.Errorf("%s (no internet) is in the set", b.HostIf)
	}

	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tbl := &nftables.Table{Family: nftables.TableFamilyINet, Name: testPrefix}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	hooks := map[string]nftables.ChainHook{}
	for _, ch := range chains {
		if ch.Table.Name == testPrefix && ch.Hooknum != nil {
			hooks[ch.Name] = *ch.Hooknum
		}
	}
	want := map[string]nftables.ChainHook{
		chainInput: *nftables.ChainHookInput, chainForward: *nftables.ChainHookForward,
		chainPostrouting: *nftables.ChainHookPostrouting,
	}
	for name, h := range want {
		if got, ok := hooks[name]; !ok || got != h {
			t.Errorf("chain %s: hook %v (present %v), want %v", name, got, ok, h)
		}
	}

	rules := func(chain string) []*nftables.Rule {
		rs, err := c.GetRules(tbl, &nftables.Chain{Name: chain, Table: tbl})
		if err != nil {
			t.Fatalf("GetRules(%s): %v", chain, err)
		}
		return rs
	}
	hasExpr := func(rs []*nftables.Rule, pred func(expr.Any) bool) bool {
		for _, r := range rs {
			if slices.ContainsFunc(r.Exprs, pred) {
				return true
			}
		}
		return false
	}
	if !hasExpr(rules(chainPostrouting), func(e expr.Any) bool { _, ok := e.(*expr.Masq); return ok }) {
		t.Error("postrouting has no masquerade rule")
	}
	fwd := rules(chainForward)
	acceptsViaSet := false
	for _, r := range fwd {
		var lookup, accept bool
		for _, e := range r.Exprs {
			if l, ok := e.(*expr.Lookup); ok && l.SetName == InternetSetName && !l.Invert {
				lookup = true
			}
			if v, ok := e.(*expr.Verdict); ok && v.Kind == expr.VerdictAccept {
				accept = true
			}
		}
		acceptsViaSet = acceptsViaSet || lookup && accept
	}
	if !acceptsViaSet {
		t.Error("forward has no accept rule gated by @" + InternetSetName)
	}

	out, err := exec.Command("nft", "list", "table", "inet", testPrefix).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, out)
	}
	text := string(out)
	t.Logf("ruleset:\n%s", text)
	for _, s := range []string{
		`iifname "` + testPrefix + `*" ct state established,related accept`,
		`iifname "` + testPrefix + `*" drop`,
		`iifname "` + testPrefix + `*" oifname "` + testPrefix + `*" drop`,
		`iifname "` + testPrefix + `*" ip daddr 169.254.0.0/16 drop`,
		`iifname "` + testPrefix + `*" ip daddr 127.0.0.0/8 drop`,
		`iifname "` + testPrefix + `*" ip daddr ` + testSubnet + ` drop`,
		`iifname @internet_ifaces accept`,
		`oifname "` + testPrefix + `*" ct state established,related accept`,
		`oifname "` + testPrefix + `*" drop`,
		`ip saddr ` + testSubnet + ` oifname != "` + testPrefix + `*" masquerade`,
	} {
		if !strings.Contains(text, s) {
			t.Errorf("ruleset lacks %q", s)
		}
	}
}

func TestTeardown(t *testing.T) {
	m := newTestManager(t)
	ctx := testCtx(t)
	ep, err := m.Setup(ctx, "td", 3, Options{AllowInternet: true})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Exists("td") {
		t.Fatal("Exists after Setup = false")
	}
	if _, err := m.Setup(ctx, "td", 9, Options{}); !errors.Is(err, ErrExists) {
		t.Errorf("second Setup of the same id: %v, want ErrExists", err)
	}
	// A wrong slot must not delete another sandbox's veth.
	other := setup(t, m, "td-other", 10, false)
	if err := m.Teardown(ctx, "td", 10); !errors.Is(err, ErrInvalid) {
		t.Errorf("Teardown with another sandbox's slot: %v, want ErrInvalid", err)
	}
	if _, err := netlink.LinkByName(other.HostIf); err != nil {
		t.Errorf("other sandbox's veth gone: %v", err)
	}

	if err := m.Teardown(ctx, "td", 3); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	assertGone(t, m, ep)
	if err := m.Teardown(ctx, "td", 3); err != nil {
		t.Errorf("second Teardown: %v", err)
	}
}

func assertGone(t *testing.T, m *Manager, ep *Endpoint) {
	t.Helper()
	if _, err := os.Stat(ep.NetNSPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns file %s: %v, want not exist", ep.NetNSPath, err)
	}
	if m.Exists(ep.ID) {
		t.Errorf("Exists(%s) after Teardown", ep.ID)
	}
	if _, err := netlink.LinkByName(ep.HostIf); err == nil {
		t.Errorf("veth %s still exists", ep.HostIf)
	}
	if slices.Contains(setMembers(t), ep.HostIf) {
		t.Errorf("%s still in the internet set", ep.HostIf)
	}
	if out, _ := exec.Command("mount").Output(); strings.Contains(string(out), ep.NetNSPath) {
		t.Errorf("%s still mounted", ep.NetNSPath)
	}
}

func TestSetupUndo(t *testing.T) {
	m := newTestManager(t)
	ctx := testCtx(t)
	m.failAfterHostSide = func() error { return errors.New("injected") }
	_, err := m.Setup(ctx, "undo", 6, Options{AllowInternet: true})
	m.failAfterHostSide = nil
	if err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Setup with injected failure: %v", err)
	}
	ep, _ := m.EndpointFor("undo", 6)
	assertGone(t, m, ep)

	// A slot beyond the pool is a user error and leaves nothing behind.
	if _, err := m.Setup(ctx, "big", 64, Options{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("slot 64 in a /24: %v, want ErrInvalid", err)
	}
	if m.Exists("big") {
		t.Error("netns left after invalid Setup")
	}
	// After undo the same id and slot work.
	ep = setup(t, m, "undo", 6, false)
	l := listenIn(t, ep.NetNSPath, net.JoinHostPort(ep.GuestIP.String(), "0"))
	mustReach(t, "host to recreated sandbox", "", net.JoinHostPort(ep.GuestIP.String(), port(l)))
}

func TestCrashRecovery(t *testing.T) {
	m1 := newTestManager(t)
	ctx := testCtx(t)
	e1, err := m1.Setup(ctx, "crash-1", 11, Options{AllowInternet: true})
	if err != nil {
		t.Fatal(err)
	}
	e2, err := m1.Setup(ctx, "crash-2", 12, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// "Crash": forget m1, start over.
	m2, err := NewManager(ctx, m1.Config(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := m2.InternetAllowed(11); err != nil || !ok {
		t.Errorf("internet permission of a live sandbox lost over restart: %v %v", ok, err)
	}
	ids, err := m2.ListNamespaces()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(ids)
	if !slices.Equal(ids, []string{"crash-1", "crash-2"}) {
		t.Errorf("ListNamespaces = %v", ids)
	}
	// Known slot for one, unknown for the other.
	if err := m2.Teardown(ctx, "crash-1", 11); err != nil {
		t.Error(err)
	}
	if err := m2.Teardown(ctx, "crash-2", -1); err != nil {
		t.Error(err)
	}
	assertGone(t, m2, e1)
	assertGone(t, m2, e2)
	if ids, _ := m2.ListNamespaces(); len(ids) != 0 {
		t.Errorf("namespaces left: %v", ids)
	}
}

func TestSetupTeardownTiming(t *testing.T) {
	m := newTestManager(t)
	ctx := testCtx(t)
	const n = 20
	var setups, teardowns []time.Duration
	for i := range n {
		id := fmt.Sprintf("tm%d", i)
		start := time.Now()
		ep, err := m.Setup(ctx, id, 20+i, Options{AllowInternet: i%2 == 0})
		if err != nil {
			t.Fatal(err)
		}
		setups = append(setups, time.Since(start))
		start = time.Now()
		if err := m.Teardown(ctx, id, 20+i); err != nil {
			t.Fatal(err)
		}
		teardowns = append(teardowns, time.Since(start))
		if _, err := os.Stat(ep.NetNSPath); err == nil {
			t.Fatalf("%s left behind", ep.NetNSPath)
		}
	}
	p := func(d []time.Duration, q float64) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[int(q*float64(len(s)-1))]
	}
	t.Logf("Setup: p50 %v p90 %v max %v; Teardown: p50 %v p90 %v max %v (n=%d)",
		p(setups, .5), p(setups, .9), p(setups, 1), p(teardowns, .5), p(teardowns, .9), p(teardowns, 1), n)
}
