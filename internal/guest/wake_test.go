package guest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// fakeWakePort answers on a loopback UDP port: it drops the first drop
// datagrams, then echoes each one (as reply, when set).
func fakeWakePort(t *testing.T, drop int64, reply string) (netip.AddrPort, *atomic.Int64) {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var got atomic.Int64
	go func() {
		buf := make([]byte, 128)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if got.Add(1) <= drop {
				continue
			}
			out := buf[:n]
			if reply != "" {
				out = []byte(reply)
			}
			_, _ = conn.WriteToUDPAddrPort(out, from)
		}
	}()
	return conn.LocalAddr().(*net.UDPAddr).AddrPort(), &got
}

func TestWakeEchoed(t *testing.T) {
	addr, got := fakeWakePort(t, 0, "")
	if err := WakeAt(context.Background(), addr, WakeThaw, time.Second); err != nil {
		t.Fatalf("Wake = %v", err)
	}
	if got.Load() != 1 {
		t.Fatalf("datagrams sent = %d, want 1", got.Load())
	}
}

// TestWakeResends: lost datagrams are sent again every WakeResend.
func TestWakeResends(t *testing.T) {
	addr, got := fakeWakePort(t, 3, "")
	start := time.Now()
	if err := WakeAt(context.Background(), addr, WakeOOM, 2*time.Second); err != nil {
		t.Fatalf("Wake = %v", err)
	}
	if got.Load() != 4 {
		t.Fatalf("datagrams sent = %d, want 4 (3 dropped)", got.Load())
	}
	if took := time.Since(start); took < 3*WakeResend-5*time.Millisecond {
		t.Fatalf("answered after %v: not re-sent every %v", took, WakeResend)
	}
}

// TestWakeOtherAnswerIsNoEcho: only the exact echo counts.
func TestWakeOtherAnswerIsNoEcho(t *testing.T) {
	addr, _ := fakeWakePort(t, 0, "airlock-wake oom")
	err := WakeAt(context.Background(), addr, WakeThaw, 200*time.Millisecond)
	if !errors.Is(err, ErrWakeNoAnswer) {
		t.Fatalf("Wake = %v, want ErrWakeNoAnswer", err)
	}
}

// TestWakeRefused: nothing on the port (an old agent) ends Wake quickly.
func TestWakeRefused(t *testing.T) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	conn.Close()
	start := time.Now()
	err = WakeAt(context.Background(), addr, WakeThaw, 5*time.Second)
	if !errors.Is(err, ErrWakeRefused) {
		t.Fatalf("Wake = %v, want ErrWakeRefused", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("refusal took %v", took)
	}
}

func TestWakeContext(t *testing.T) {
	addr, _ := fakeWakePort(t, 1<<30, "")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := WakeAt(ctx, addr, WakeThaw, 5*time.Second)
	if err == nil {
		t.Fatal("Wake answered by a silent agent")
	}
	if !errors.Is(err, ErrWakeNoAnswer) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wake = %v", err)
	}
}
