//go:build linux

package egressproxy

import (
	"net"

	"golang.org/x/sys/unix"
)

// ackNow makes the kernel send a pending ACK for what was read from c at
// once (TCP_QUICKACK), instead of up to 40 ms later. After the sandbox's
// handshake the proxy has nothing to send (Go sent its session tickets
// with its own Finished), so the ACK of the client's Finished would wait
// for the delayed-ACK timer; a client with Nagle on (Python's
// socket.create_connection, for one) holds its request until that ACK,
// and every new connection took 40 ms more than straight to the server,
// which (OpenSSL) answers the Finished with its tickets.
func ackNow(c net.Conn) {
	if pc, ok := c.(*prefixConn); ok {
		c = pc.Conn
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
	})
}
