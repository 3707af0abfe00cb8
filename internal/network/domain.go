package network

import (
	"errors"
	"fmt"
	"strings"
)

// Domain rules. A rule is a name ("example.com": that name only) or a
// wildcard ("*.example.com": every name below example.com, not example.com
// itself). The sandbox's DNS filter asks DecideName for every query.

// maxDomainLen is the longest name in presentation form (RFC 1035).
const maxDomainLen = 253

// ParseDomain validates and normalizes a domain rule: lower case, no
// trailing dot, letters/digits/hyphens in 1..63-character labels that
// neither start nor end with a hyphen, at least two labels, a non-numeric
// last label, and "*" only as the whole first label.
func ParseDomain(s string) (string, error) {
	name := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(s), "."))
	body := strings.TrimPrefix(name, "*.")
	if body == "" {
		return "", errors.New("empty domain name")
	}
	if len(name) > maxDomainLen {
		return "", fmt.Errorf("domain name longer than %d characters", maxDomainLen)
	}
	labels := strings.Split(body, ".")
	if len(labels) < 2 {
		return "", errors.New("a domain rule needs at least two labels (example.com)")
	}
	for _, l := range labels {
		if err := checkLabel(l); err != nil {
			return "", err
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", errors.New("the last label of a domain name cannot be numeric")
	}
	return name, nil
}

func checkLabel(l string) error {
	switch {
	case l == "":
		return errors.New("empty label in domain name")
	case l == "*":
		return errors.New(`"*" is only allowed as the first label ("*.example.com")`)
	case len(l) > 63:
		return fmt.Errorf("label %.10q… longer than 63 characters", l)
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("label %q starts or ends with a hyphen", l)
	}
	for _, r := range l {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("label %q has character %q (only letters, digits and hyphens)", l, r)
		}
	}
	return nil
}

// matchDomain reports whether the (normalized) query name matches rule.
func matchDomain(rule, name string) bool {
	if suffix, ok := strings.CutPrefix(rule, "*"); ok {
		return strings.HasSuffix(name, suffix) && len(name) > len(suffix)
	}
	return name == rule
}

// NameVerdict is the DNS filter's decision for one query name.
type NameVerdict struct {
	// Allow: forward the query. Learn: also add the A answers to the
	// sandbox's allow set (the name matched an allowOut rule).
	Allow, Learn bool
	// Rule explains the decision ("allowOut *.example.com", "denyOut
	// example.com", "not in allowOut", "default").
	Rule string
}

// DecideName applies the domain rules to a query name (any case, trailing
// dot or not). allowOut wins over denyOut, as for addresses. A name that
// matches neither is refused when the policy lists allowOut domains and
// everything else is denied (internet off or denyOut 0.0.0.0/0): it could
// not be reached anyway, and refusing it tells the program so at once.
// Otherwise it is resolved, and reaching its addresses is up to the CIDR
// rules.
func (e Egress) DecideName(name string, internet bool) NameVerdict {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	for _, r := range e.AllowDomains {
		if matchDomain(r, name) {
			return NameVerdict{Allow: true, Learn: true, Rule: "allowOut " + r}
		}
	}
	for _, r := range e.DenyDomains {
		if matchDomain(r, name) {
			return NameVerdict{Rule: "denyOut " + r}
		}
	}
	if len(e.AllowDomains) > 0 && e.deniesRest(internet) {
		return NameVerdict{Rule: "not in allowOut"}
	}
	return NameVerdict{Allow: true, Rule: "default"}
}

// deniesRest reports whether addresses outside allowOut are unreachable.
func (e Egress) deniesRest(internet bool) bool {
	if !internet {
		return true
	}
	for _, p := range e.Deny {
		if p.Bits() == 0 {
			return true
		}
	}
	return false
}
