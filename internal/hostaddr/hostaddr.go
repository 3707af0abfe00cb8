// Package hostaddr answers whether an address is one of this host's own,
// for the checked dialers that must not let a tenant's URL (a bucket
// endpoint, a webhook) reach the host itself.
package hostaddr

import (
	"net"
	"net/netip"
)

// Own reports whether a is an address of one of this host's interfaces,
// as list gives them (nil: net.InterfaceAddrs). A list that fails to
// answer reports false.
func Own(a netip.Addr, list func() ([]net.Addr, error)) bool {
	if list == nil {
		list = net.InterfaceAddrs
	}
	addrs, err := list()
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, ha := range addrs {
		if n, ok := ha.(*net.IPNet); ok {
			if h, ok := netip.AddrFromSlice(n.IP); ok && h.Unmap() == a {
				return true
			}
		}
	}
	return false
}
