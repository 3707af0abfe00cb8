// Package guestconn tracks the host's TCP connections to sandbox guests so
// they can be torn down before a sandbox is checkpointed.
//
// gVisor (runsc 20221219) refuses to checkpoint a sandbox whose network
// stack holds a TCP endpoint on eth0 in a connected state (ESTABLISHED,
// CLOSE_WAIT, TIME_WAIT, …), and a refused checkpoint stops the sandbox.
// Every connection the daemon opens to an agent therefore goes through a
// Tracker: connections are aborted with a RST (SO_LINGER 0) from the host side,
// so the guest endpoint moves straight to a closed state and never enters
// TIME_WAIT (which only the side that closes first does).
package guestconn

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Tracker dials guest connections and remembers them by remote address.
// It is safe for concurrent use.
type Tracker struct {
	dialer net.Dialer
	// OnAbort, when set, is called after Abort reset n > 0 connections.
	OnAbort func(ip netip.Addr, n int)

	// mu guards conns.
	mu    sync.Mutex
	conns map[netip.Addr]map[*conn]struct{}
}

// New returns a Tracker whose dials time out after dialTimeout.
func New(dialTimeout time.Duration) *Tracker {
	return &Tracker{
		dialer: net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second},
		conns:  map[netip.Addr]map[*conn]struct{}{},
	}
}

// conn is a tracked connection; closing it always resets (RST).
type conn struct {
	net.Conn
	t    *Tracker
	addr netip.Addr
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() { c.t.forget(c) })
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	return c.Conn.Close()
}

func (t *Tracker) forget(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if set := t.conns[c.addr]; set != nil {
		delete(set, c)
		if len(set) == 0 {
			delete(t.conns, c.addr)
		}
	}
}

// DialContext dials addr and tracks the connection (net/http's
// Transport.DialContext signature).
func (t *Tracker) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	nc, err := t.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	ap, err := netip.ParseAddrPort(nc.RemoteAddr().String())
	if err != nil {
		return nc, nil // not an IP connection: nothing to track
	}
	c := &conn{Conn: nc, t: t, addr: ap.Addr().Unmap()}
	t.mu.Lock()
	set := t.conns[c.addr]
	if set == nil {
		set = map[*conn]struct{}{}
		t.conns[c.addr] = set
	}
	set[c] = struct{}{}
	t.mu.Unlock()
	return c, nil
}

// Abort resets every tracked connection to ip (idle or in use) and returns
// how many there were. Requests using them fail.
func (t *Tracker) Abort(ip netip.Addr) int {
	t.mu.Lock()
	set := t.conns[ip.Unmap()]
	list := make([]*conn, 0, len(set))
	for c := range set {
		list = append(list, c)
	}
	t.mu.Unlock()
	for _, c := range list {
		_ = c.Close()
	}
	if len(list) > 0 && t.OnAbort != nil {
		t.OnAbort(ip, len(list))
	}
	return len(list)
}

// Count returns the number of open tracked connections to ip.
func (t *Tracker) Count(ip netip.Addr) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns[ip.Unmap()])
}

// Wrap makes tr dial through t and returns it.
func (t *Tracker) Wrap(tr *http.Transport) *http.Transport {
	tr.DialContext = t.DialContext
	return tr
}
