package network

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// MaxEgressRules bounds allowOut+denyOut entries of one sandbox.
const MaxEgressRules = 256

// ErrDomainRule is returned by ParseEgress for domain entries
// ("example.com", "*.example.com"): only CIDRs and IPs are enforced today.
var ErrDomainRule = errors.New("domain rules are not supported yet")

// Egress is a sandbox's outbound policy on top of the internet switch
// (E2B semantics): destinations in Deny are blocked, destinations in Allow
// are reachable even when Deny covers them or internet access is off.
// Private, host and pool ranges stay blocked whatever the policy says.
type Egress struct {
	Allow []netip.Prefix
	Deny  []netip.Prefix
}

// Empty reports whether the policy adds nothing to the internet switch.
func (e Egress) Empty() bool { return len(e.Allow) == 0 && len(e.Deny) == 0 }

// Strings renders the policy back as allowOut/denyOut lists.
func (e Egress) Strings() (allow, deny []string) {
	for _, p := range e.Allow {
		allow = append(allow, prefixString(p))
	}
	for _, p := range e.Deny {
		deny = append(deny, prefixString(p))
	}
	return allow, deny
}

func prefixString(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// ParseEgress parses allowOut/denyOut entries: IPv4 addresses or CIDRs.
// Domains give an error wrapping ErrDomainRule; anything else a plain error
// naming the entry.
func ParseEgress(allow, deny []string) (Egress, error) {
	if len(allow)+len(deny) > MaxEgressRules {
		return Egress{}, fmt.Errorf("at most %d allowOut/denyOut entries are supported", MaxEgressRules)
	}
	var e Egress
	var err error
	if e.Allow, err = parsePrefixes("allowOut", allow); err != nil {
		return Egress{}, err
	}
	if e.Deny, err = parsePrefixes("denyOut", deny); err != nil {
		return Egress{}, err
	}
	return e, nil
}

func parsePrefixes(field string, in []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range in {
		p, err := parseEntry(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%s entry %q: %w", field, s, err)
		}
		out = append(out, p)
	}
	return out, nil
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
	if looksLikeDomain(s) {
		return netip.Prefix{}, ErrDomainRule
	}
	return netip.Prefix{}, errors.New("not an IP address, CIDR or domain")
}

func looksLikeDomain(s string) bool {
	s = strings.TrimPrefix(s, "*.")
	if !strings.Contains(s, ".") || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return false // a numeric "TLD" is a mistyped address
	}
	for _, label := range labels {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}
