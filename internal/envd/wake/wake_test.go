package wake

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// serve runs Serve on a loopback port with two counting actions.
func serve(t *testing.T) (addr *net.UDPAddr, thaws, ooms *atomic.Int64, done chan error, cancel context.CancelFunc) {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	thaws, ooms = new(atomic.Int64), new(atomic.Int64)
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() {
		done <- Serve(ctx, conn, map[string]func(){
			"airlock-wake thaw": func() { thaws.Add(1) },
			"airlock-wake oom":  func() { ooms.Add(1) },
		}, nil)
	}()
	t.Cleanup(cancel)
	return conn.LocalAddr().(*net.UDPAddr), thaws, ooms, done, cancel
}

// send sends payload from a fresh socket and returns the answer ("" when
// none came within wait).
func send(t *testing.T, to *net.UDPAddr, payload []byte, wait time.Duration) string {
	t.Helper()
	c, err := net.DialUDP("udp4", nil, to)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(payload); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 256)
	n, err := c.Read(buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

func TestExactMessagesActAndEcho(t *testing.T) {
	addr, thaws, ooms, _, _ := serve(t)
	if got := send(t, addr, []byte("airlock-wake thaw"), 2*time.Second); got != "airlock-wake thaw" {
		t.Fatalf("echo of thaw = %q", got)
	}
	if got := send(t, addr, []byte("airlock-wake oom"), 2*time.Second); got != "airlock-wake oom" {
		t.Fatalf("echo of oom = %q", got)
	}
	if thaws.Load() != 1 || ooms.Load() != 1 {
		t.Fatalf("actions: thaw %d, oom %d; want 1 and 1", thaws.Load(), ooms.Load())
	}
}

// TestOtherPayloadsIgnored: near misses, junk, empty and oversized
// datagrams run nothing and get no answer; the port still works after.
func TestOtherPayloadsIgnored(t *testing.T) {
	addr, thaws, ooms, _, _ := serve(t)
	big := make([]byte, 4000)
	copy(big, "airlock-wake thaw")
	for _, p := range [][]byte{
		[]byte("airlock-wake thaw\n"), []byte("AIRLOCK-WAKE THAW"), []byte(" airlock-wake oom"),
		[]byte("airlock-wake"), []byte("thaw"), []byte("oom"), {}, []byte("airlock-wake thaw\x00"), big,
	} {
		if got := send(t, addr, p, 100*time.Millisecond); got != "" {
			t.Errorf("payload %q answered %q", p, got)
		}
	}
	if thaws.Load() != 0 || ooms.Load() != 0 {
		t.Fatalf("actions ran for other payloads: thaw %d, oom %d", thaws.Load(), ooms.Load())
	}
	if got := send(t, addr, []byte("airlock-wake oom"), 2*time.Second); got != "airlock-wake oom" {
		t.Fatalf("after junk: echo = %q", got)
	}
}

// TestRepeatedFromManySenders: a process that floods the port only repeats
// the actions (each harmless when repeated); every sender gets its echo.
func TestRepeatedFromManySenders(t *testing.T) {
	addr, thaws, _, _, _ := serve(t)
	for i := 0; i < 20; i++ {
		if got := send(t, addr, []byte("airlock-wake thaw"), 2*time.Second); got != "airlock-wake thaw" {
			t.Fatalf("sender %d: echo = %q", i, got)
		}
	}
	if thaws.Load() != 20 {
		t.Fatalf("thaws = %d, want 20", thaws.Load())
	}
}

func TestServeEndsWithContext(t *testing.T) {
	_, _, _, done, cancel := serve(t)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve = %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Serve did not end after its context")
	}
}
