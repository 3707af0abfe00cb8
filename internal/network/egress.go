package network

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// MaxEgressRules bounds allowOut+denyOut entries of one sandbox.
const MaxEgressRules = 256

// Egress is a sandbox's outbound policy on top of the internet switch
// (E2B semantics): destinations in Deny are blocked, destinations in Allow
// are reachable even when Deny covers them or internet access is off.
// Private, host and pool ranges stay blocked whatever the policy says.
//
// AllowDomains/DenyDomains are names ("example.com") and wildcards
// ("*.example.com", any name below example.com) enforced by the sandbox's
// DNS filter (dns.go): see Egress.DecideName.
type Egress struct {
	Allow        []netip.Prefix
	Deny         []netip.Prefix
	AllowDomains []string
	DenyDomains  []string
	// Hold: the sandbox has an approval hook; new TCP destinations that
	// Allow does not open and no specific Deny entry names are held for it
	// (approval_linux.go). A catch-all Deny (0.0.0.0/0) then means "ask".
	Hold bool
	// Relayed: the sandbox has an egressProxy (set by the manager from
	// Options.EgressProxy). Its TCP is then held in the SOCKS relay
	// (relayhold_linux.go), not in the kernel's queue.
	Relayed bool
}

// Empty reports whether the policy adds nothing to the internet switch.
func (e Egress) Empty() bool {
	return len(e.Allow) == 0 && len(e.Deny) == 0 && !e.HasDomains() && !e.Hold
}

// HasDomains reports whether the policy has domain entries (and so needs
// the DNS filter).
func (e Egress) HasDomains() bool { return len(e.AllowDomains) > 0 || len(e.DenyDomains) > 0 }

// Strings renders the policy back as allowOut/denyOut lists.
func (e Egress) Strings() (allow, deny []string) {
	for _, p := range e.Allow {
		allow = append(allow, prefixString(p))
	}
	allow = append(allow, e.AllowDomains...)
	for _, p := range e.Deny {
		deny = append(deny, prefixString(p))
	}
	deny = append(deny, e.DenyDomains...)
	return allow, deny
}

func prefixString(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// ParseEgress parses allowOut/denyOut entries: IPv4 addresses, CIDRs,
// domain names and "*." wildcards (normalized to lower case without a
// trailing dot). Anything else gives an error naming the entry.
func ParseEgress(allow, deny []string) (Egress, error) {
	if len(allow)+len(deny) > MaxEgressRules {
		return Egress{}, fmt.Errorf("at most %d allowOut/denyOut entries are supported", MaxEgressRules)
	}
	var e Egress
	var err error
	if e.Allow, e.AllowDomains, err = parseEntries("allowOut", allow); err != nil {
		return Egress{}, err
	}
	if e.Deny, e.DenyDomains, err = parseEntries("denyOut", deny); err != nil {
		return Egress{}, err
	}
	return e, nil
}

func parseEntries(field string, in []string) ([]netip.Prefix, []string, error) {
	var out []netip.Prefix
	var names []string
	for _, s := range in {
		s0 := strings.TrimSpace(s)
		if looksLikeDomain(s0) {
			name, err := ParseDomain(s0)
			if err != nil {
				return nil, nil, fmt.Errorf("%s entry %q: %w", field, s, err)
			}
			names = append(names, name)
			continue
		}
		p, err := parseEntry(s0)
		if err != nil {
			return nil, nil, fmt.Errorf("%s entry %q: %w", field, s, err)
		}
		out = append(out, p)
	}
	return out, names, nil
}

func parseEntry(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, errors.New("empty entry")
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, errors.New("not a valid CIDR")
		}
		if !p.Addr().Is4() {
			return netip.Prefix{}, errors.New("only IPv4 is supported")
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err == nil {
		if !a.Is4() {
			return netip.Prefix{}, errors.New("only IPv4 is supported")
		}
		return netip.PrefixFrom(a, 32), nil
	}
	return netip.Prefix{}, errors.New("not an IP address, CIDR or domain name")
}

// looksLikeDomain tells a name-shaped entry (letters in its last label, no
// slash or colon) from an address-shaped one, so that a bad name gets a name
// error and a bad address an address error.
func looksLikeDomain(s string) bool {
	if s == "" || strings.ContainsAny(s, "/:") {
		return false
	}
	s = strings.TrimSuffix(s, ".")
	last := s[strings.LastIndex(s, ".")+1:]
	return strings.Trim(last, "0123456789") != "" && strings.Contains(s, ".")
}
