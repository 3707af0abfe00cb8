//go:build linux

package gvisor

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
)

// fakeRunsc returns a runtime whose runsc is a script that appends its
// arguments to the returned file, one call per line.
func fakeRunsc(t *testing.T) (*Runtime, string) {
	t.Helper()
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	script := filepath.Join(dir, "runsc")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$*\" >>"+calls+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Runtime{runsc: script, root: dir, platform: "systrap", log: slog.New(slog.NewTextHandler(io.Discard, nil))}, calls
}

func runscCalls(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// echoAgent is a wake port that echoes the wake messages; it returns its
// port and a channel of what it received.
func echoAgent(t *testing.T) (uint16, chan string) {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	got := make(chan string, 16)
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
			_, _ = conn.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return uint16(conn.LocalAddr().(*net.UDPAddr).Port), got
}

// TestSignalWakesByDatagram: SIGUSR1 and SIGUSR2 to a sandbox whose address
// is known reach the agent's wake port and spawn no runsc.
func TestSignalWakesByDatagram(t *testing.T) {
	r, calls := fakeRunsc(t)
	port, got := echoAgent(t)
	r.addrs.port = port
	r.KeepGuestAddr("sbx1", netip.MustParseAddr("127.0.0.1")) // as a restarted daemon does
	if err := r.Signal(context.Background(), "sbx1", syscall.SIGUSR1); err != nil {
		t.Fatalf("Signal(USR1) = %v", err)
	}
	r.wakeGuard("sbx1")
	for _, want := range []string{guest.WakeThaw, guest.WakeOOM} {
		select {
		case m := <-got:
			if m != want {
				t.Fatalf("agent got %q, want %q", m, want)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("agent never got %q", want)
		}
	}
	if c := runscCalls(t, calls); c != nil {
		t.Fatalf("runsc spawned on the happy path: %q", c)
	}
	if d, k := r.WakeCounts(); d != 2 || k != 0 {
		t.Fatalf("WakeCounts = %d datagrams, %d runsc; want 2, 0", d, k)
	}
}

// TestSignalFallsBackToRunscKill: without an address, with nothing on the
// wake port (an old agent), and for other signals, runsc kill is used.
func TestSignalFallsBackToRunscKill(t *testing.T) {
	r, calls := fakeRunsc(t)
	closed, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	r.addrs.port = uint16(closed.LocalAddr().(*net.UDPAddr).Port)
	closed.Close()
	r.addrs.set("old1", netip.MustParseAddr("127.0.0.1"))
	start := time.Now()
	if err := r.Signal(context.Background(), "old1", syscall.SIGUSR1); err != nil {
		t.Fatalf("Signal(old agent) = %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the fallback for an old agent took %v", took)
	}
	if err := r.Signal(context.Background(), "noaddr", syscall.SIGUSR1); err != nil {
		t.Fatalf("Signal(no address) = %v", err)
	}
	r.wakeGuard("noaddr")
	if err := r.Signal(context.Background(), "old1", syscall.SIGTERM); err != nil {
		t.Fatalf("Signal(TERM) = %v", err)
	}
	c := runscCalls(t, calls)
	want := []string{"kill old1 10", "kill noaddr 10", "kill noaddr USR2", "kill old1 15"}
	if len(c) != len(want) {
		t.Fatalf("runsc calls = %q, want %d ending in %q", c, len(want), want)
	}
	for i := range want {
		if !strings.HasSuffix(c[i], want[i]) {
			t.Fatalf("runsc call %d = %q, want … %q", i, c[i], want[i])
		}
	}
	if d, k := r.WakeCounts(); d != 0 || k != 3 {
		t.Fatalf("WakeCounts = %d datagrams, %d runsc; want 0, 3", d, k)
	}
	// Destroy-time forgetting: the address is gone with the sandbox.
	r.addrs.forget("old1")
	if _, ok := r.addrs.get("old1"); ok {
		t.Fatal("address kept after forget")
	}
}

// TestNoGuardWakeWhileSaved: while a sandbox is checkpointed (its tasks
// stopped), the memory watcher's wake-ups are dropped, neither sent nor
// run through runsc; a failed checkpoint (undo) or a restore wakes again.
func TestNoGuardWakeWhileSaved(t *testing.T) {
	r, calls := fakeRunsc(t)
	port, got := echoAgent(t)
	r.addrs.port = port
	addr := netip.MustParseAddr("127.0.0.1")
	r.addrs.set("sbx1", addr)
	undo := r.addrs.saving("sbx1")
	r.wakeGuard("sbx1")
	select {
	case m := <-got:
		t.Fatalf("agent of a saved sandbox got %q", m)
	case <-time.After(100 * time.Millisecond):
	}
	undo()
	r.wakeGuard("sbx1")
	if m := <-got; m != guest.WakeOOM {
		t.Fatalf("after a failed checkpoint: agent got %q", m)
	}
	r.addrs.saving("sbx1")
	r.addrs.set("sbx1", addr) // restored
	if err := r.Signal(context.Background(), "sbx1", syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m != guest.WakeThaw {
		t.Fatalf("after the restore: agent got %q", m)
	}
	if c := runscCalls(t, calls); c != nil {
		t.Fatalf("runsc spawned: %q", c)
	}
}

// silentAgent is a wake port that reads and never answers; after answerAfter
// (0: never) it starts echoing.
func silentAgent(t *testing.T, answerAfter time.Duration) uint16 {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	start := time.Now()
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if answerAfter > 0 && time.Since(start) >= answerAfter {
				_, _ = conn.WriteToUDPAddrPort(buf[:n], from)
			}
		}
	}()
	return uint16(conn.LocalAddr().(*net.UDPAddr).Port)
}

// TestSlowAgentGetsRunscKillAlongside: no answer within wakeTimeout starts
// runsc kill while the datagram goes on; whichever acts first ends Signal.
func TestSlowAgentGetsRunscKillAlongside(t *testing.T) {
	old := wakeTimeout
	wakeTimeout = 200 * time.Millisecond
	t.Cleanup(func() { wakeTimeout = old })

	// A silent agent: Signal returns when runsc kill has run.
	r, calls := fakeRunsc(t)
	r.addrs.port = silentAgent(t, 0)
	r.addrs.set("sbx1", netip.MustParseAddr("127.0.0.1"))
	start := time.Now()
	if err := r.Signal(context.Background(), "sbx1", syscall.SIGUSR1); err != nil {
		t.Fatalf("Signal = %v", err)
	}
	if took := time.Since(start); took < wakeTimeout || took > wakeTimeout+3*time.Second {
		t.Fatalf("Signal took %v, want a little over %v", took, wakeTimeout)
	}
	if c := runscCalls(t, calls); len(c) != 1 || !strings.HasSuffix(c[0], "kill sbx1 10") {
		t.Fatalf("runsc calls = %q, want one kill", c)
	}

	// An agent that answers after 400 ms while runsc kill takes 10 s:
	// Signal returns on the answer.
	r2, _ := fakeRunsc(t)
	if err := os.WriteFile(r2.runsc, []byte("#!/bin/sh\nexec sleep 10\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r2.addrs.port = silentAgent(t, 400*time.Millisecond)
	r2.addrs.set("sbx2", netip.MustParseAddr("127.0.0.1"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start = time.Now()
	if err := r2.Signal(ctx, "sbx2", syscall.SIGUSR1); err != nil {
		t.Fatalf("Signal = %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Signal took %v: it waited for the slow runsc kill", took)
	}
	if d, k := r2.WakeCounts(); d != 1 || k != 1 {
		t.Fatalf("WakeCounts = %d, %d; want 1 datagram, 1 runsc", d, k)
	}
}
