//go:build linux

package nfs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"

	gonfs "github.com/willscott/go-nfs"
	"golang.org/x/sys/unix"
)

func init() {
	// go-nfs logs every refused request at Info; errors are enough.
	gonfs.Log.SetLevel(gonfs.ErrorLevel)
}

// Config is where a sandbox's server listens.
type Config struct {
	// Iface is the host side of the sandbox's veth: the listener is bound to
	// it (SO_BINDTODEVICE), so a packet that arrives on any other interface
	// never reaches it.
	Iface string
	// Addr is the host's address on Iface (the guest's gateway) and Port the
	// port (network.VolumeServerPort, where the firewall redirects the
	// guest's connections to network.VolumeServerAddr).
	Addr netip.Addr
	Port uint16
	// Mark is set on the listening socket (SO_MARK); the firewall's input
	// rule accepts sandbox packets only for a socket with this mark.
	Mark uint32
	// UID and GID own what the guest creates.
	UID, GID int
	// StateDir keeps the handle tables of exports whose file system gives
	// no file handles (a bucket volume), so a later server for the same
	// sandbox (a restored VM, a restarted daemon; a fork child given a
	// copy) answers the handles its guest holds. "" keeps them in memory.
	StateDir string
}

// Server is one sandbox's NFSv3 server (MOUNT and NFS on one TCP port).
type Server struct {
	h  *handler
	ln net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	done   chan struct{}
}

// Listen opens the listener and serves exps until Close.
func Listen(cfg Config, exps []Export) (*Server, error) {
	h, err := newHandler(exps, cfg.UID, cfg.GID, cfg.StateDir)
	if err != nil {
		return nil, err
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if cfg.Iface != "" {
				serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, cfg.Iface)
			}
			if serr == nil && cfg.Mark != 0 {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(cfg.Mark))
			}
			if serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
			}
		})
		return errors.Join(err, serr)
	}}
	addr := net.JoinHostPort(cfg.Addr.String(), strconv.Itoa(int(cfg.Port)))
	ln, err := lc.Listen(context.Background(), "tcp4", addr)
	if err != nil {
		h.close()
		return nil, fmt.Errorf("nfs: listening on %s (%s): %w", addr, cfg.Iface, err)
	}
	s := &Server{h: h, ln: ln, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	srv := &gonfs.Server{Handler: h}
	go func() {
		defer close(s.done)
		_ = srv.Serve(trackingListener{ln, s})
	}()
	return s, nil
}

// Addr is the listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops listening and closes every connection (the guest's NFS
// client reconnects to the next server at the same address).
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	<-s.done
	s.h.close()
	return err
}

type trackingListener struct {
	net.Listener
	s *Server
}

func (l trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	// Closing a connection (Close, or the daemon exiting) resets it: no
	// FIN_WAIT or TIME_WAIT state is left on the host, which would keep
	// the guest's client, reconnecting from the same reserved port, out
	// until it expired (about a minute, measured after a daemon restart).
	if t, ok := c.(*net.TCPConn); ok {
		_ = t.SetLinger(0)
	}
	tc := &trackedConn{Conn: c, s: l.s}
	l.s.conns[tc] = struct{}{}
	return tc, nil
}

type trackedConn struct {
	net.Conn
	s    *Server
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}
