//go:build linux

package network

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
)

// cutSetMembers lists the cut set of the test table (read by name, so the
// test also runs against a build without one, and fails there).
func cutSetMembers(t *testing.T) []string {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tbl := &nftables.Table{Family: nftables.TableFamilyINet, Name: testPrefix}
	s, err := c.GetSetByName(tbl, "cut_ifaces")
	if err != nil {
		t.Fatalf("the table has no cut set: %v", err)
	}
	elems, err := c.GetSetElements(s)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range elems {
		names = append(names, strings.TrimRight(string(e.Key), "\x00"))
	}
	return names
}

// holdListener accepts connections in the namespace at path and keeps them
// open (reading) until the test ends.
func holdListener(t *testing.T, path, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	if err := inNS(path, func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatalf("listen %s in %s: %v", addr, path, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	return l
}

// Cut makes a sandbox unreachable both ways at once, its open connections
// included, without deleting its veth: that waits on the kernel's rtnl lock
// (seconds on a busy host) and is left to Teardown. After Teardown the veth
// name is no longer cut, so a new sandbox in the same slot (same veth name,
// same address) is reachable.
func TestCutDropsTrafficAndLeavesTheVeth(t *testing.T) {
	m := newTestManager(t)
	ctx := testCtx(t)
	ext := makeOutside(t)
	const slot = 11
	a, err := m.Setup(ctx, "cut-a", slot, Options{AllowInternet: true})
	if err != nil {
		t.Fatal(err)
	}
	extL := listenIn(t, ext, net.JoinHostPort(extIP, "0"))
	extAddr := net.JoinHostPort(extIP, port(extL))
	aL := listenIn(t, a.NetNSPath, net.JoinHostPort(a.GuestIP.String(), "0"))
	aAddr := net.JoinHostPort(a.GuestIP.String(), port(aL))
	hold := holdListener(t, a.NetNSPath, net.JoinHostPort(a.GuestIP.String(), "0"))
	mustReach(t, "host to A before the cut", "", aAddr)
	mustReach(t, "A to outside before the cut", a.NetNSPath, extAddr)
	open, err := net.DialTimeout("tcp", hold.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatalf("opening a connection to A: %v", err)
	}
	defer open.Close()
	vethBefore, err := netlink.LinkByName(a.HostIf)
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	if err := m.Cut(ctx, "cut-a", slot); err != nil {
		t.Fatalf("Cut: %v", err)
	}
	t.Logf("Cut took %v", time.Since(t0))

	// The veth is still there (Cut made no rtnetlink change)...
	if l, err := netlink.LinkByName(a.HostIf); err != nil || l.Attrs().Index != vethBefore.Attrs().Index {
		t.Errorf("veth %s after Cut: %v; want it left for Teardown", a.HostIf, err)
	}
	if !slices.Contains(cutSetMembers(t), a.HostIf) {
		t.Errorf("%s not in the cut set after Cut", a.HostIf)
	}
	// ...but nothing gets through, either way.
	mustFail(t, "host to A after the cut", "", aAddr)
	mustFail(t, "A to outside after the cut", a.NetNSPath, extAddr)
	if err := pingFrom("", a.GuestIP); err == nil {
		t.Error("A answered a ping after the cut")
	}
	// The connection opened before the cut is reset on its next send.
	_ = open.SetDeadline(time.Now().Add(3 * time.Second))
	_, werr := open.Write([]byte("after the cut\n"))
	var rerr error
	if werr == nil {
		_, rerr = open.Read(make([]byte, 1))
	}
	if werr == nil && !errors.Is(rerr, syscall.ECONNRESET) {
		t.Errorf("connection opened before the cut: write ok, read %v; want connection reset", rerr)
	}
	if err := m.Cut(ctx, "cut-a", slot); err != nil {
		t.Errorf("second Cut: %v", err)
	}

	t1 := time.Now()
	if err := m.Teardown(ctx, "cut-a", slot); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	t.Logf("Teardown took %v", time.Since(t1))
	assertGone(t, m, a)
	if slices.Contains(cutSetMembers(t), a.HostIf) {
		t.Errorf("%s still cut after Teardown", a.HostIf)
	}

	// The slot again: same veth name, same address, reachable.
	b := setup(t, m, "cut-b", slot, true)
	if b.HostIf != a.HostIf || b.GuestIP != a.GuestIP {
		t.Fatalf("slot %d reused as %s/%s, want %s/%s", slot, b.HostIf, b.GuestIP, a.HostIf, a.GuestIP)
	}
	bL := listenIn(t, b.NetNSPath, net.JoinHostPort(b.GuestIP.String(), "0"))
	mustReach(t, "host to B (A's reused slot)", "", net.JoinHostPort(b.GuestIP.String(), port(bL)))
	mustReach(t, "B (A's reused slot) to outside", b.NetNSPath, extAddr)
}

// A sandbox cut before a restart stays cut in the new table until its
// teardown; a leftover cut of a free slot does not stick to the next
// sandbox set up there.
func TestCutSurvivesRestart(t *testing.T) {
	m := newTestManager(t)
	ctx := testCtx(t)
	c := setup(t, m, "cut-c", 12, false)
	cL := listenIn(t, c.NetNSPath, net.JoinHostPort(c.GuestIP.String(), "0"))
	cAddr := net.JoinHostPort(c.GuestIP.String(), port(cL))
	mustReach(t, "host to C", "", cAddr)
	if err := m.Cut(ctx, "cut-c", 12); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m2, err := NewManager(ctx, m.Config(), log)
	if err != nil {
		t.Fatalf("NewManager again: %v", err)
	}
	if !slices.Contains(cutSetMembers(t), c.HostIf) {
		t.Errorf("%s not cut any more after the restart", c.HostIf)
	}
	mustFail(t, "host to C after the restart", "", cAddr)

	// A cut whose veth is gone (a teardown that lost its slot) is cleared
	// by the next Setup of that slot.
	if err := m2.fw.setCut(HostIfName(testPrefix, 13), true); err != nil {
		t.Fatal(err)
	}
	d := setup(t, m2, "cut-d", 13, false)
	dL := listenIn(t, d.NetNSPath, net.JoinHostPort(d.GuestIP.String(), "0"))
	mustReach(t, "host to D (slot with a leftover cut)", "", net.JoinHostPort(d.GuestIP.String(), port(dL)))
}

// A daemon upgraded over a table of a version without the cut set starts
// (it failed with "reading set cut_ifaces: no such file or directory") and
// keeps the sandboxes' internet permissions.
func TestNewManagerOverTableWithoutCutSet(t *testing.T) {
	m := newTestManager(t)
	ctx := testCtx(t)
	a := setup(t, m, "cut-old", 14, true)
	old := `delete table inet ` + testPrefix + `
table inet ` + testPrefix + ` {
	set internet_ifaces { type ifname; elements = { "` + a.HostIf + `" } }
}
`
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(old)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("installing an old table: %v %s", err, out)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := NewManager(ctx, m.Config(), log); err != nil {
		t.Fatalf("NewManager over a table without %s: %v", CutSetName, err)
	}
	if got := setMembers(t); !slices.Equal(got, []string{a.HostIf}) {
		t.Errorf("internet set after the upgrade = %v, want [%s]", got, a.HostIf)
	}
	if got := cutSetMembers(t); len(got) != 0 {
		t.Errorf("cut set after the upgrade = %v, want empty", got)
	}
}

// The cut's updates share one netlink connection, and a connection whose
// update failed is replaced: the next cut still takes.
func TestCutConnectionKeptAndReplacedAfterAFailure(t *testing.T) {
	m := newTestManager(t)
	ctx := testCtx(t)
	a := setup(t, m, "cut-f", 15, false)
	aL := listenIn(t, a.NetNSPath, net.JoinHostPort(a.GuestIP.String(), "0"))
	aAddr := net.JoinHostPort(a.GuestIP.String(), port(aL))
	mustReach(t, "host to A", "", aAddr)

	// Removing a name that is not in the set is no error, and keeps the
	// connection.
	if err := m.fw.setCut(HostIfName(testPrefix, 16), false); err != nil {
		t.Fatalf("uncutting a name that is not cut: %v", err)
	}
	first := m.fw.cutc.c
	if first == nil {
		t.Fatal("no connection kept after an update")
	}
	if err := m.fw.setCut(HostIfName(testPrefix, 16), false); err != nil {
		t.Fatal(err)
	}
	if m.fw.cutc.c != first {
		t.Error("a second update opened a new connection")
	}

	// An update that fails (a set of a table that does not exist) drops
	// the connection.
	cutSet := m.fw.cut
	bogus := *cutSet
	bogus.Table = &nftables.Table{Family: nftables.TableFamilyINet, Name: testPrefix + "-none"}
	m.fw.cut = &bogus
	err := m.fw.setCut(a.HostIf, true)
	m.fw.cut = cutSet
	if err == nil {
		t.Fatal("cutting through a set of a missing table succeeded")
	}
	if m.fw.cutc.c != nil {
		t.Error("the connection of a failed update was kept")
	}

	if err := m.Cut(ctx, "cut-f", 15); err != nil {
		t.Fatalf("Cut after a failed update: %v", err)
	}
	if !slices.Contains(cutSetMembers(t), a.HostIf) {
		t.Errorf("%s not in the cut set", a.HostIf)
	}
	mustFail(t, "host to A after the cut", "", aAddr)
}
