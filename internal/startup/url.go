package startup

import (
	"net"
	"net/netip"
)

// DisplayURL is the URL clients use for a listener address (an unspecified
// address is announced as 127.0.0.1).
func DisplayURL(addr net.Addr) string {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	ip := ap.Addr().Unmap()
	if ip.IsUnspecified() {
		ip = netip.MustParseAddr("127.0.0.1")
	}
	return "http://" + netip.AddrPortFrom(ip, ap.Port()).String()
}
