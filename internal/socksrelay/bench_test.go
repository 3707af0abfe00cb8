package socksrelay

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// sink accepts connections and reads them to the end, then answers one
// byte; it measures what reaches it.
func sink(b *testing.B) netip.AddrPort {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(io.Discard, c)
				_, _ = c.Write([]byte{1})
			}()
		}
	}()
	return netip.MustParseAddrPort(l.Addr().String())
}

func send(b *testing.B, addr string, payload []byte) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(payload); err != nil {
		b.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if _, err := io.ReadAll(c); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkConnect is one small connection (connect, 1 KiB, answer):
// direct, and through the relay and a SOCKS5 server with auth (loopback,
// so the added cost is the relay's and the proxy's own work).
func BenchmarkConnect(b *testing.B) {
	payload := make([]byte, 1024)
	for _, via := range []string{"direct", "relay"} {
		b.Run(via, func(b *testing.B) {
			dst := sink(b)
			addr := dst.String()
			if via == "relay" {
				_, srv := socksServerB(b)
				addr = relayB(b, Upstream{Address: srv, Username: "u", Password: "p"}, dst)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				send(b, addr, payload)
			}
		})
	}
}

// BenchmarkThroughput moves 64 MiB per op, direct and through the relay.
func BenchmarkThroughput(b *testing.B) {
	payload := make([]byte, 64<<20)
	for _, via := range []string{"direct", "relay"} {
		b.Run(via, func(b *testing.B) {
			dst := sink(b)
			addr := dst.String()
			if via == "relay" {
				_, srv := socksServerB(b)
				addr = relayB(b, Upstream{Address: srv, Username: "u", Password: "p"}, dst)
			}
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				send(b, addr, payload)
			}
		})
	}
}
