package network

import "net/netip"

// deniedIPv6 are the IPv6 ranges a daemon-side connection made for a
// tenant refuses besides non-global and unique-local addresses: those
// that embed an IPv4 address (NAT64, 6to4, Teredo), which would carry a
// connection past the IPv4 checks.
var deniedIPv6 = []netip.Prefix{
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("2001::/32"),
}

// Denies reports whether a connection the daemon opens from the host on a
// tenant's behalf (a registry pull for a template's FROM) must refuse a,
// and the range that denies it. It applies what sandboxes may not reach:
// the ranges always blocked (AlwaysBlocked), the sandbox pool, and the
// operator deny list less its exceptions (DenyOut nil: DefaultDenyOut).
// Sandboxes have no IPv6 egress at all; here IPv6 is refused unless it is
// global unicast that embeds no IPv4 address.
func (c Config) Denies(a netip.Addr) (netip.Prefix, bool) {
	a = a.Unmap()
	if !a.IsValid() {
		return netip.Prefix{}, true
	}
	if a.Is6() {
		switch {
		case a.IsLoopback(), a.IsUnspecified():
			return netip.PrefixFrom(a, 128), true
		case !a.IsGlobalUnicast(), a.IsPrivate():
			p, _ := a.Prefix(10)
			if a.IsPrivate() {
				p, _ = a.Prefix(7)
			}
			return p, true
		}
		for _, p := range deniedIPv6 {
			if p.Contains(a) {
				return p, true
			}
		}
		return netip.Prefix{}, false
	}
	host := netip.PrefixFrom(a, 32)
	if b, ok := AlwaysBlocked(host); ok {
		return b, true
	}
	if c.Subnet.IsValid() && c.Subnet.Contains(a) {
		return c.Subnet, true
	}
	deny := c.DenyOut
	if deny == nil {
		deny = DefaultDenyOut
	}
	for _, d := range deny {
		if d.Contains(a) && !c.excepted(host) {
			return d, true
		}
	}
	return netip.Prefix{}, false
}
