package network

import (
	"fmt"
	"net/netip"
	"strings"
)

// The operator's deny list (airlock serve --deny-out, --deny-out-except):
// destinations no sandbox reaches, whatever its own allowOut says. It sits
// in the forward chain after the ranges that are always blocked (host,
// pool, loopback, link-local, multicast, reserved) and before the
// per-sandbox policy, so an allowOut entry can never open it.

// blockedDestinations are never reachable from a sandbox, even with internet
// allowed (in addition to the sandbox pool itself, the host's own addresses,
// which input drops, and the operator's deny list, denyout_linux.go).
var blockedDestinations = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local, cloud metadata (AWS, GCP, Azure IMDS, …)
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud metadata (inside 100.64/10, which --deny-out none opens)
	netip.MustParsePrefix("224.0.0.0/4"),        // multicast
	netip.MustParsePrefix("240.0.0.0/4"),        // reserved, broadcast
}

// blockedButDNS are never reachable from a sandbox except for DNS (UDP and
// TCP port 53): Azure's WireServer and HostGAPlugin (168.63.129.16, ports
// 80 and 32526; the VM's guest agent guards it with an OUTPUT owner match,
// which forwarded sandbox traffic never passes) is also Azure's resolver.
var blockedButDNS = []netip.Prefix{
	netip.MustParsePrefix("168.63.129.16/32"),
}

// AlwaysBlocked returns a range Airlock blocks for every sandbox whatever
// the operator says (blockedDestinations, blockedButDNS) that p overlaps.
func AlwaysBlocked(p netip.Prefix) (netip.Prefix, bool) {
	for _, b := range append(blockedDestinations[:len(blockedDestinations):len(blockedDestinations)], blockedButDNS...) {
		if b.Overlaps(p) {
			return b, true
		}
	}
	return netip.Prefix{}, false
}

// DefaultDenyOut is the operator deny list when --deny-out is not given:
// the private networks a host usually sits in (RFC 1918), carrier-grade NAT
// (RFC 6598, also the address space of several Kubernetes CNIs and VPNs) and
// the benchmarking range (RFC 2544). IPv6 needs no entry: no IPv6 packet from
// a sandbox is ever forwarded.
var DefaultDenyOut = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("198.18.0.0/15"),
}

// DenyOutNone is the --deny-out value that turns the operator deny list off.
const DenyOutNone = "none"

// ParseDenyOut parses the values of --deny-out or --deny-out-except (flag
// names the flag in errors): IPv4 addresses and CIDRs, comma-separated or
// repeated. An empty list, empty values and DenyOutNone give an empty,
// non-nil list. IPv6 entries are refused: sandboxes have no IPv6 egress at
// all, so an IPv6 range would suggest a rule that does nothing.
func ParseDenyOut(flag string, values []string) ([]netip.Prefix, error) {
	out := []netip.Prefix{}
	none := false
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			switch {
			case s == "":
				continue
			case strings.EqualFold(s, DenyOutNone):
				none = true
				continue
			}
			p, err := parseOperatorEntry(s)
			if err != nil {
				return nil, fmt.Errorf("invalid --%s entry %q: %w", flag, s, err)
			}
			out = append(out, p)
		}
	}
	if none && len(out) > 0 {
		return nil, fmt.Errorf("invalid --%s: %q cannot be combined with ranges", flag, DenyOutNone)
	}
	return out, nil
}

func parseOperatorEntry(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, fmt.Errorf("not an IPv4 address or CIDR")
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("not an IPv4 address or CIDR")
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if !p.Addr().Unmap().Is4() || p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("only IPv4: sandboxes have no IPv6 egress (every IPv6 packet from a sandbox is dropped)")
	}
	return p.Masked(), nil
}

// DenyOutConflicts returns, for each entry of allow that overlaps the
// operator deny list (ignoring the exceptions), the denied ranges it
// overlaps. These allowOut entries cannot open what the operator denies
// (a create asking for them is accepted, E2B apps keep working), so the
// manager notes them in the sandbox's egress audit log.
func (c Config) DenyOutConflicts(allow []netip.Prefix) map[netip.Prefix][]netip.Prefix {
	var out map[netip.Prefix][]netip.Prefix
	for _, a := range allow {
		for _, d := range c.DenyOut {
			if !a.Overlaps(d) || c.excepted(a) {
				continue
			}
			if out == nil {
				out = map[netip.Prefix][]netip.Prefix{}
			}
			out[a] = append(out[a], d)
		}
	}
	return out
}

// excepted reports whether p lies entirely inside one of the exceptions.
func (c Config) excepted(p netip.Prefix) bool {
	for _, e := range c.DenyOutExcept {
		if e.Bits() <= p.Bits() && e.Contains(p.Addr()) {
			return true
		}
	}
	return false
}
