//go:build linux

package network

import (
	"net/netip"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Volumes on microVMs (internal/volume/nfs): each microVM with volumes has
// its own NFS server on the host side of its veth, and its guest mounts
// VolumeServerAddr:VolumeGuestPort. That address is the same in every
// guest, so a guest restored in another netns (a fork child, a create from
// a snapshot) still finds its server: prerouting redirects it to the host
// address of the veth the packet came in on, port VolumeServerPort.
// input then accepts it only when the socket the kernel finds for it
// carries VolumeServerMark: the server's listener is bound to that one veth
// (SO_BINDTODEVICE), so another sandbox's packets find no socket and are
// dropped like any packet to the host. Nothing else on the host becomes
// reachable.
var VolumeServerAddr = netip.MustParseAddr(VolumeServerAddrString)

const (
	// VolumeServerAddrString is VolumeServerAddr.
	VolumeServerAddrString = "169.254.20.49"
	// VolumeGuestPort is the port the guest mounts (MOUNT and NFS).
	VolumeGuestPort = 2049
	// VolumeServerPort is where the servers listen on the host.
	VolumeServerPort = 20490
	// VolumeServerMark is the servers' SO_MARK.
	VolumeServerMark = 0x20490000
)

// volumeRedirect: tcp to VolumeServerAddr:VolumeGuestPort → the incoming
// interface's address, VolumeServerPort.
func volumeRedirect() []expr.Any {
	var r []expr.Any
	r = append(r, ipv4()...)
	r = append(r,
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: VolumeServerAddr.AsSlice()},
	)
	r = append(r, l4DPort(unix.IPPROTO_TCP, VolumeGuestPort)...)
	r = append(r,
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(VolumeServerPort)},
		&expr.Redir{RegisterProtoMin: 1},
	)
	return r
}

// volumeAccept: tcp to VolumeServerPort whose socket has VolumeServerMark.
func volumeAccept() []expr.Any {
	var r []expr.Any
	r = append(r, ipv4()...)
	r = append(r, l4DPort(unix.IPPROTO_TCP, VolumeServerPort)...)
	r = append(r,
		&expr.Socket{Key: expr.SocketKeyMark, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(VolumeServerMark)},
		&expr.Verdict{Kind: expr.VerdictAccept},
	)
	return r
}
