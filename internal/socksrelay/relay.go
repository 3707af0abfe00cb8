package socksrelay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Upstream is a sandbox's egressProxy, as the relay needs it.
type Upstream struct {
	Sandbox string
	// Address is the SOCKS5 server, host:port.
	Address string
	// Username and Password for RFC 1929 auth; both empty: no auth.
	Username, Password string
	// Name returns the name the sandbox resolved to a ("" when unknown);
	// nil: always the address.
	Name func(a netip.Addr) string
	// Refuse, when set, says which addresses of the SOCKS server itself
	// the relay will not dial (a name checked at create may resolve
	// elsewhere later).
	Refuse func(a netip.Addr) bool
	// Approve, when set, is asked before the CONNECT whether the
	// sandbox may reach dst (its approval hook; it may block for the
	// hook's deadline); false resets the sandbox's connection and the
	// SOCKS server sees nothing.
	Approve func(ctx context.Context, dst netip.AddrPort) bool
}

// DialTimeout bounds reaching the SOCKS server and its CONNECT.
const DialTimeout = 15 * time.Second

// target is the CONNECT target for dst: the resolved name with dst's port
// when one is known, else dst itself.
func (u Upstream) target(dst netip.AddrPort) string {
	if u.Name != nil {
		if n := u.Name(dst.Addr()); n != "" {
			return net.JoinHostPort(n, strconv.Itoa(int(dst.Port())))
		}
	}
	return dst.String()
}

// Dial opens dst through u's SOCKS5 server with CONNECT (by name when u
// knows one for dst's address).
func (u Upstream) Dial(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	target := u.target(dst)
	c, err := socksConnect(ctx, u.Address, u.Username, u.Password, target, u.Refuse)
	if err != nil {
		return nil, fmt.Errorf("egress proxy %s: CONNECT %s: %w", u.Address, target, err)
	}
	return c, nil
}

// Dialer adapts Upstream.Dial to the net.Dialer shape the interception
// proxy takes (egressproxy.Proxy.Dial); addr must be ip:port.
func (u Upstream) Dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		dst, err := netip.ParseAddrPort(addr)
		if err != nil {
			return nil, fmt.Errorf("egress proxy: %q is not ip:port: %w", addr, err)
		}
		return u.Dial(ctx, dst)
	}
}

// Relay serves the connections the firewall steers to it.
type Relay struct {
	// Lookup returns the egressProxy of the sandbox at guest address src;
	// false: no sandbox with one (the connection is closed unread).
	Lookup func(src netip.Addr) (Upstream, bool)
	// OriginalDst reads a steered connection's destination
	// (egressproxy.OriginalDst on Linux).
	OriginalDst func(c net.Conn) (netip.AddrPort, error)
	Log         *slog.Logger
}

func (r *Relay) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

// Serve accepts on l until ctx ends or l is closed.
func (r *Relay) Serve(ctx context.Context, l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("socks relay: accept: %w", err)
		}
		go r.Handle(ctx, c)
	}
}

// Handle relays one steered connection and closes it.
func (r *Relay) Handle(ctx context.Context, c net.Conn) {
	src, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		reset(c)
		return
	}
	dst, err := r.OriginalDst(c)
	if err != nil || dst.String() == c.LocalAddr().String() {
		reset(c) // not steered: a direct dial of the relay's port
		return
	}
	up, ok := r.Lookup(src.Addr().Unmap())
	if !ok {
		r.log().Warn("socks relay: connection from no sandbox with an egressProxy", "from", src.Addr(), "to", dst)
		reset(c)
		return
	}
	if up.Approve != nil && !up.Approve(ctx, dst) {
		r.log().Info("socks relay: refused by the approval hook", "sandbox", up.Sandbox, "to", dst)
		reset(c)
		return
	}
	upc, err := up.Dial(ctx, dst)
	if err != nil {
		// Never a direct fallback: the sandbox sees its connection reset.
		r.log().Info("socks relay: upstream failed", "sandbox", up.Sandbox, "to", dst, "err", err)
		reset(c)
		return
	}
	Pipe(c, upc)
}

// reset closes c with an RST (SO_LINGER 0), so the sandbox's connect or
// first read fails at once rather than seeing a clean end.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Pipe copies a to b and b to a until both directions end, passing each
// end on as a half-close, then closes both.
func Pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(b, a); closeWrite(b) }()
	go func() { defer wg.Done(); _, _ = io.Copy(a, b); closeWrite(a) }()
	wg.Wait()
	_ = a.Close()
	_ = b.Close()
}

func closeWrite(c net.Conn) {
	if x, ok := c.(interface{ CloseWrite() error }); ok {
		_ = x.CloseWrite()
		return
	}
	_ = c.Close()
}
