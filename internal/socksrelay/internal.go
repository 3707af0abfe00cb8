package socksrelay

import "net/netip"

// internalRanges are the IPv4 ranges besides RFC 1918 that no egressProxy
// may name unless the operator allows private proxies: carrier-grade NAT,
// the benchmarking range, and the reserved ones.
var internalRanges = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba's metadata server
	netip.MustParsePrefix("168.63.129.16/32"),   // Azure's WireServer
	netip.MustParsePrefix("64:ff9b::/96"),       // NAT64 and the rest that embeds IPv4
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("2001::/32"),
}

// Internal reports whether a is a private or internal address (loopback,
// link-local with cloud metadata, RFC 1918, unique-local, CGNAT,
// multicast, reserved), which E2B refuses as an egressProxy address
// ("Invalid egress proxy config").
func Internal(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || !a.IsGlobalUnicast() || a.IsPrivate() {
		return true // loopback, link-local, multicast, unspecified too
	}
	for _, p := range internalRanges {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
