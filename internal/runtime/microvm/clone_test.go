//go:build linux

package microvm

import (
	"bufio"
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

func TestGuestAddressFromCmdline(t *testing.T) {
	p, g, err := guestAddress(vmRecord{Cmdline: "console=ttyS0 ip=10.1.2.6::10.1.2.5:255.255.255.252::eth0:off", GuestIP: "10.1.2.6"})
	if err != nil || p != netip.MustParsePrefix("10.1.2.6/30") || g != netip.MustParseAddr("10.1.2.5") {
		t.Fatalf("guestAddress = %v %v %v", p, g, err)
	}
	if _, _, err := guestAddress(vmRecord{Cmdline: "console=ttyS0"}); err == nil {
		t.Fatal("guestAddress without ip= succeeded")
	}
}

// netManager is one network manager for several sandboxes of a test.
func netManager(t *testing.T, ctx context.Context) *network.Manager {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	subnet := netip.MustParsePrefix(envOr("AIRLOCK_TEST_SUBNET", "10.98.0.0/24"))
	nm, err := network.NewManager(ctx, network.Config{Subnet: subnet, NamePrefix: envOr("AIRLOCK_TEST_NET_PREFIX", "almvt")}, log)
	if err != nil {
		t.Fatalf("network manager: %v", err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := nm.Close(cctx, true); err != nil {
			t.Errorf("closing network manager: %v", err)
		}
	})
	return nm
}

func setupNet(t *testing.T, ctx context.Context, nm *network.Manager, id string, slot int) *network.Endpoint {
	t.Helper()
	ep, err := nm.Setup(ctx, id, slot, network.Options{})
	if err != nil {
		t.Fatalf("network setup %s: %v", id, err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := nm.Teardown(cctx, id, slot); err != nil {
			t.Errorf("teardown %s: %v", id, err)
		}
	})
	return ep
}

// pssKB reads the proportional set size of the VMM of id.
func pssKB(t *testing.T, r *Runtime, id string) int {
	rec, err := r.readRecord(id)
	if err != nil {
		t.Fatalf("record of %s: %v", id, err)
	}
	f, err := os.Open("/proc/" + strconv.Itoa(rec.PID) + "/smaps_rollup")
	if err != nil {
		t.Fatalf("smaps of %s: %v", id, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
			return atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	t.Fatalf("no Pss for %s", id)
	return 0
}

// ramMapping sums the smaps of the VMM's guest-RAM mapping (memory):
// its PSS and the pages the guest wrote (dirty) in kB.
func ramMapping(t *testing.T, r *Runtime, id string) (pss, private int) {
	rec, err := r.readRecord(id)
	if err != nil {
		t.Fatalf("record of %s: %v", id, err)
	}
	f, err := os.Open("/proc/" + strconv.Itoa(rec.PID) + "/smaps")
	if err != nil {
		t.Fatalf("smaps of %s: %v", id, err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = strings.HasSuffix(line, "/"+memoryFile)
			continue
		}
		if !in || len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "Pss:":
			pss += atoi(fields[1])
		case "Private_Dirty:", "Shared_Dirty:":
			private += atoi(fields[1])
		}
	}
	return pss, private
}

// TestCloneTwoChildren checkpoints a parent VM, clones two children in
// their own netns, restores them and the parent: each child is re-addressed
// to its own IP, sees the parent's files and background process, and
// writes stay isolated.
func TestCloneTwoChildren(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	nm := netManager(t, ctx)
	const pid = "mvmclp"
	const memMB = 256
	pep := setupNet(t, ctx, nm, pid, 1)
	r := newRuntime(t)
	base := filepath.Join(t.TempDir(), "sb")
	pdir := filepath.Join(base, pid)
	spec := runtime.Spec{ID: pid, RootFS: fixture.rootfs, Dir: pdir, NetNSPath: pep.NetNSPath, AgentPath: fixture.agent,
		Resources: runtime.Resources{MemoryMB: memMB}}
	if err := r.Start(ctx, spec); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = r.Destroy(context.Background(), pid, pdir) })
	if err := waitAgent(ctx, r, pid, pep.GuestIP); err != nil {
		t.Fatalf("%v\nconsole:\n%s", err, runtime.LogTail(ConsolePath(pdir), 4096))
	}
	bg, _ := guestRun(t, ctx, pep.GuestIP, "sleep 1000 >/dev/null 2>&1 & echo $!; echo parent > /root/state; sync")
	img := filepath.Join(pdir, "checkpoint")
	if err := r.Checkpoint(ctx, pid, pdir, img); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	type kid struct {
		id, dir string
		ep      *network.Endpoint
	}
	var kids []kid
	for i, id := range []string{"mvmclc1", "mvmclc2"} {
		k := kid{id: id, dir: filepath.Join(base, id), ep: setupNet(t, ctx, nm, id, 2+i)}
		t0 := time.Now()
		if err := r.Clone(ctx, pdir, runtime.Spec{ID: id, RootFS: fixture.rootfs, Dir: k.dir, NetNSPath: k.ep.NetNSPath,
			AgentPath: fixture.agent, Resources: spec.Resources}); err != nil {
			t.Fatalf("Clone %s: %v", id, err)
		}
		t.Cleanup(func() { _ = r.Destroy(context.Background(), k.id, k.dir) })
		cloned := time.Since(t0)
		if err := r.Restore(ctx, runtime.Spec{ID: id, Dir: k.dir, NetNSPath: k.ep.NetNSPath}, img); err != nil {
			t.Fatalf("Restore %s: %v\nconsole:\n%s", id, err, runtime.LogTail(ConsolePath(k.dir), 2048))
		}
		if err := waitAgent(ctx, r, id, k.ep.GuestIP); err != nil {
			t.Fatalf("child %s at %s: %v", id, k.ep.GuestIP, err)
		}
		t.Logf("child %s: clone %s, clone+restore+re-address %s", id, cloned, time.Since(t0))
		kids = append(kids, k)
	}
	if err := r.Restore(ctx, runtime.Spec{ID: pid, Dir: pdir, NetNSPath: pep.NetNSPath}, img); err != nil {
		t.Fatalf("Restore parent: %v", err)
	}
	if err := waitAgent(ctx, r, pid, pep.GuestIP); err != nil {
		t.Fatalf("parent after fork: %v", err)
	}
	for _, k := range kids {
		if k.ep.GuestIP == pep.GuestIP {
			t.Fatalf("child %s has the parent's IP", k.id)
		}
		out, code := guestRun(t, ctx, k.ep.GuestIP, "kill -0 "+bg+" && cat /root/state && ip -4 -o addr show dev eth0")
		if code != 0 || !strings.HasPrefix(out, "parent") || !strings.Contains(out, " "+k.ep.GuestIP.String()+"/") {
			t.Errorf("child %s: %q (exit %d), want the parent's process and file and its own address %s", k.id, out, code, k.ep.GuestIP)
		}
		if out, code := guestRun(t, ctx, k.ep.GuestIP, "echo "+k.id+" > /root/state; cat /root/state"); code != 0 || out != k.id {
			t.Errorf("child %s write: %q (exit %d)", k.id, out, code)
		}
		if err := r.Signal(ctx, k.id, syscall.SIGUSR1); err != nil {
			t.Errorf("Signal(%s) = %v", k.id, err)
		}
	}
	for _, k := range kids {
		if out, _ := guestRun(t, ctx, k.ep.GuestIP, "cat /root/state"); out != k.id {
			t.Errorf("child %s reads %q: writes are not isolated", k.id, out)
		}
		kb := pssKB(t, r, k.id)
		rp, rd := ramMapping(t, r, k.id)
		t.Logf("child %s: VMM PSS %d MB of %d MB guest RAM; its RAM mapping: PSS %d MB, dirty %d MB", k.id, kb/1024, memMB, rp/1024, rd/1024)
		if kb/1024 >= memMB {
			t.Errorf("child %s: PSS %d MB is not below its RAM size %d MB", k.id, kb/1024, memMB)
		}
	}
	if out, _ := guestRun(t, ctx, pep.GuestIP, "cat /root/state"); out != "parent" {
		t.Errorf("parent reads %q after the children wrote", out)
	}
	// A clone pauses and resumes like any VM.
	k := kids[0]
	kimg := filepath.Join(k.dir, "checkpoint")
	if err := r.Checkpoint(ctx, k.id, k.dir, kimg); err != nil {
		t.Fatalf("Checkpoint child: %v", err)
	}
	if err := r.Restore(ctx, runtime.Spec{ID: k.id, Dir: k.dir, NetNSPath: k.ep.NetNSPath}, kimg); err != nil {
		t.Fatalf("Restore child: %v", err)
	}
	if err := waitAgent(ctx, r, k.id, k.ep.GuestIP); err != nil {
		t.Fatalf("child after pause: %v", err)
	}
	if out, code := guestRun(t, ctx, k.ep.GuestIP, "kill -0 "+bg+" && cat /root/state"); code != 0 || out != k.id {
		t.Errorf("child after pause/resume: %q (exit %d)", out, code)
	}
}
