// Package hostaddr classifies the addresses that the daemon's checked
// dialers must not let a tenant's URL (a bucket endpoint, a webhook)
// reach: the host's own, loopback and link-local ones, and the
// operator's private networks.
package hostaddr

import (
	"fmt"
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

// Special reports why a is never a tenant's destination, or "": a
// loopback, unspecified, link-local or multicast address, which no
// operator setting opens.
func Special(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsLoopback(), a.IsUnspecified():
		return fmt.Sprintf("%s is a loopback address", a)
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return fmt.Sprintf("%s is a link-local address", a)
	case a.IsMulticast(), a.IsInterfaceLocalMulticast():
		return fmt.Sprintf("%s is a multicast address", a)
	}
	return ""
}

// Private reports why a belongs to an operator's own networks, or "": a
// private (RFC 1918, unique-local) or shared carrier-grade NAT address.
func Private(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsPrivate():
		return fmt.Sprintf("%s is a private address", a)
	case cgnat.Contains(a):
		return fmt.Sprintf("%s is a shared (carrier-grade NAT) address", a)
	}
	return ""
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")
