package socksrelay

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/socksrelay/sockstest"
)

func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// echoServer answers every connection with "hello " + what it read until
// the client's half-close.
func echoServer(t *testing.T) netip.AddrPort {
	l := listen(t)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				_, _ = c.Write(append([]byte("hello "), b...))
			}()
		}
	}()
	return netip.MustParseAddrPort(l.Addr().String())
}

func socksServerB(b *testing.B) (*sockstest.Server, string) { return socksServer(b, "u", "p") }

func relayB(b *testing.B, up Upstream, dst netip.AddrPort) string { return relay(b, up, dst) }

func socksServer(t testing.TB, user, pass string) (*sockstest.Server, string) {
	s := &sockstest.Server{User: user, Password: pass}
	l := listen(t)
	go func() { _ = s.Serve(l) }()
	return s, l.Addr().String()
}

// relay starts a Relay whose every connection "was steered" to dst from a
// sandbox with up.
func relay(t testing.TB, up Upstream, dst netip.AddrPort) string {
	l := listen(t)
	r := &Relay{
		Lookup:      func(netip.Addr) (Upstream, bool) { return up, up.Address != "" },
		OriginalDst: func(net.Conn) (netip.AddrPort, error) { return dst, nil },
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = r.Serve(ctx, l) }()
	return l.Addr().String()
}

// roundTrip sends msg through addr, half-closes and reads the answer.
func roundTrip(addr, msg string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	_ = c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	return string(b), err
}

func TestRelayConnectsByNameWithAuth(t *testing.T) {
	dst := echoServer(t)
	srv, addr := socksServer(t, "alice", "s3cret")
	// The DNS filter's record, standing in: the echo server's address was
	// resolved from "localhost", which the SOCKS server resolves itself.
	up := Upstream{Sandbox: "sb", Address: addr, Username: "alice", Password: "s3cret",
		Name: func(a netip.Addr) string {
			if a == dst.Addr() {
				return "localhost"
			}
			return ""
		}}
	got, err := roundTrip(relay(t, up, dst), "world")
	if err != nil || got != "hello world" {
		t.Fatalf("through the relay: %q, %v; want %q", got, err, "hello world")
	}
	want := net.JoinHostPort("localhost", itoa(dst.Port()))
	if ts := srv.Targets(); len(ts) != 1 || ts[0] != want {
		t.Fatalf("CONNECT targets = %v, want [%s] (the name, not the address)", ts, want)
	}
}

func TestRelayConnectsByAddressWithoutName(t *testing.T) {
	dst := echoServer(t)
	srv, addr := socksServer(t, "", "")
	got, err := roundTrip(relay(t, Upstream{Address: addr}, dst), "x")
	if err != nil || got != "hello x" {
		t.Fatalf("through the relay: %q, %v", got, err)
	}
	if ts := srv.Targets(); len(ts) != 1 || ts[0] != dst.String() {
		t.Fatalf("CONNECT targets = %v, want [%s]", ts, dst)
	}
}

// A wrong password, a server that is down, a refused CONNECT: the
// sandbox's connection fails, and nothing reaches the destination.
func TestRelayFailsClosed(t *testing.T) {
	reached := make(chan struct{}, 10)
	l := listen(t)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			reached <- struct{}{}
			_ = c.Close()
		}
	}()
	dst := netip.MustParseAddrPort(l.Addr().String())
	srv, addr := socksServer(t, "alice", "right")
	down := listen(t)
	downAddr := down.Addr().String()
	_ = down.Close()
	closedPort := listen(t)
	closedDst := netip.MustParseAddrPort(closedPort.Addr().String())
	_ = closedPort.Close()
	for _, tc := range []struct {
		name string
		up   Upstream
		dst  netip.AddrPort
	}{
		{"wrong password", Upstream{Address: addr, Username: "alice", Password: "wrong"}, dst},
		{"no credentials", Upstream{Address: addr}, dst},
		{"server down", Upstream{Address: downAddr}, dst},
		{"connect refused", Upstream{Address: addr, Username: "alice", Password: "right"}, closedDst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := roundTrip(relay(t, tc.up, tc.dst), "x")
			if err == nil && got != "" {
				t.Fatalf("got %q through a failing upstream", got)
			}
		})
	}
	select {
	case <-reached:
		t.Fatal("the destination was reached without a working proxy")
	default:
	}
	if srv.AuthFailures() != 1 {
		t.Errorf("auth failures = %d, want 1", srv.AuthFailures())
	}
}

func TestDialErrors(t *testing.T) {
	_, addr := socksServer(t, "u", "p")
	_, err := Upstream{Address: addr, Username: "u", Password: "x"}.Dial(context.Background(), netip.MustParseAddrPort("127.0.0.1:1"))
	var se *Error
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "auth") {
		t.Fatalf("wrong password: %v, want a socks auth refusal", err)
	}
	_, err = Upstream{Address: addr, Username: "u", Password: "p"}.Dial(context.Background(), netip.MustParseAddrPort("127.0.0.1:1"))
	if !errors.As(err, &se) || se.Reply != 5 {
		t.Fatalf("closed port: %v, want reply 5 (connection refused)", err)
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

// TestRelayAsksApprove: Upstream.Approve is asked with the original
// destination before the CONNECT; a refusal resets the sandbox's
// connection and the SOCKS server sees no CONNECT; an approval (after a
// wait) relays as usual.
func TestRelayAsksApprove(t *testing.T) {
	dst := echoServer(t)
	srv, addr := socksServer(t, "", "")
	var mu sync.Mutex
	var asked []netip.AddrPort
	allow := false
	up := Upstream{Address: addr, Approve: func(_ context.Context, d netip.AddrPort) bool {
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, d)
		return allow
	}}
	r := relay(t, up, dst)
	if got, err := roundTrip(r, "x"); err == nil && got != "" {
		t.Fatalf("denied: got %q through the relay, want a reset", got)
	}
	if ts := srv.Targets(); len(ts) != 0 {
		t.Fatalf("denied: the SOCKS server saw CONNECT %v", ts)
	}
	mu.Lock()
	allow = true
	mu.Unlock()
	start := time.Now()
	if got, err := roundTrip(r, "y"); err != nil || got != "hello y" {
		t.Fatalf("allowed: %q, %v", got, err)
	}
	if w := time.Since(start); w < 200*time.Millisecond {
		t.Errorf("allowed after %v, want the approval's wait first", w)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || asked[0] != dst || asked[1] != dst {
		t.Errorf("Approve asked %v, want %s twice", asked, dst)
	}
}
