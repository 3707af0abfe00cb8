package imagebuild

import (
	"fmt"
	"net/netip"
	"strings"
)

// PullConfig limits what FROM may read: which addresses the registry
// client dials, where local image files may be, and how much an image may
// unpack to. The zero value denies nothing and allows no local images.
type PullConfig struct {
	// Denies reports whether the registry client must refuse to connect to
	// an address, and the range that denies it (network.Config.Denies: the
	// ranges sandboxes may not reach). The host's own addresses are always
	// refused as well. nil: no range is denied but the host's own.
	Denies func(netip.Addr) (netip.Prefix, bool)
	// Allow are registry addresses (--registry-allow) dialed even though
	// Denies or the host's own addresses would refuse them.
	Allow []AddrRule
	// ImageDir is the directory oci-layout:// and docker-archive:// images
	// must be in (--image-dir); empty refuses them.
	ImageDir string
	// MaxImageBytes caps what one image may unpack to, in bytes (its
	// layers, compressed and uncompressed); 0 means DefaultMaxImageBytes.
	MaxImageBytes int64
}

// DefaultMaxImageBytes is the default cap on one FROM image's layers.
const DefaultMaxImageBytes = 16 << 30

// AddrRule is one --registry-allow entry: a range, or one address and port.
type AddrRule struct {
	Prefix netip.Prefix
	Port   uint16 // 0: any port
}

func (r AddrRule) String() string {
	if r.Port == 0 {
		return r.Prefix.String()
	}
	return netip.AddrPortFrom(r.Prefix.Addr(), r.Port).String()
}

func (r AddrRule) allows(a netip.Addr, port uint16) bool {
	return r.Prefix.Contains(a) && (r.Port == 0 || r.Port == port)
}

// ParseAddrRules parses --registry-allow values: IP addresses, CIDRs or
// ip:port ([ipv6]:port), comma-separated or repeated.
func ParseAddrRules(values []string) ([]AddrRule, error) {
	var out []AddrRule
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if ap, err := netip.ParseAddrPort(s); err == nil {
				a := ap.Addr().Unmap()
				out = append(out, AddrRule{Prefix: netip.PrefixFrom(a, a.BitLen()), Port: ap.Port()})
				continue
			}
			if p, err := netip.ParsePrefix(s); err == nil {
				if p.Addr().Is4In6() {
					p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
				}
				out = append(out, AddrRule{Prefix: p.Masked()})
				continue
			}
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("invalid --registry-allow entry %q: want an IP address, a CIDR or ip:port", s)
			}
			a = a.Unmap()
			out = append(out, AddrRule{Prefix: netip.PrefixFrom(a, a.BitLen())})
		}
	}
	return out, nil
}
