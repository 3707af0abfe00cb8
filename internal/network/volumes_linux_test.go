//go:build linux

package network

import (
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// volumeListener listens like a microVM's volume server (internal/volume/nfs):
// on the host side of ep's veth, bound to it, with VolumeServerMark when
// marked.
func volumeListener(t *testing.T, ep *Endpoint, marked bool) {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, ep.HostIf)
			if serr == nil && marked {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, VolumeServerMark)
			}
		})
		return errors.Join(err, serr)
	}}
	l, err := lc.Listen(context.Background(), "tcp4", net.JoinHostPort(ep.HostIP.String(), strconv.Itoa(VolumeServerPort)))
	if err != nil {
		t.Fatal(err)
	}
	echoServer(t, l)
}

// TestVolumeServerReachableOnlyFromItsSandbox: a sandbox reaches its own
// volume server at VolumeServerAddr:VolumeGuestPort (redirected) and at its
// host address, and nothing else new: not another sandbox's server, not a
// listener on the same port without the mark.
func TestVolumeServerReachableOnlyFromItsSandbox(t *testing.T) {
	m := newTestManager(t)
	a := setup(t, m, "va", 5, true)
	b := setup(t, m, "vb", 6, true)
	c := setup(t, m, "vc", 9, false)
	volumeListener(t, a, true)
	volumeListener(t, c, false) // on the port, but not a volume server
	fixed := net.JoinHostPort(VolumeServerAddr.String(), strconv.Itoa(VolumeGuestPort))
	aSrv := net.JoinHostPort(a.HostIP.String(), strconv.Itoa(VolumeServerPort))

	if got := mustReach(t, "A to its server at the fixed address", a.NetNSPath, fixed); got == "" {
		t.Error("A's server said nothing")
	}
	mustReach(t, "A to its server at its host address", a.NetNSPath, aSrv)
	mustFail(t, "B to the fixed address (no server of its own)", b.NetNSPath, fixed)
	mustFail(t, "B to A's server", b.NetNSPath, aSrv)
	mustFail(t, "C to an unmarked listener on its own host address", c.NetNSPath,
		net.JoinHostPort(c.HostIP.String(), strconv.Itoa(VolumeServerPort)))
	mustFail(t, "C to the fixed address (unmarked listener)", c.NetNSPath, fixed)
	mustFail(t, "A to the fixed address on another port", a.NetNSPath, net.JoinHostPort(VolumeServerAddr.String(), "2050"))
}
