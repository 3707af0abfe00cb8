package egressproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"path"
	"sort"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// E2B's limits on network.rules (spec §11.2).
const (
	MaxDomains            = 10
	MaxDomainLen          = 128
	MaxRulesPerDomain     = 1
	MaxHeadersPerRule     = 20
	MaxHeaderNameLen      = 64
	MaxHeaderValueLen     = 2048
	MaxPlaceholdersDomain = 32
)

// MsgMalformedPlaceholder is E2B's 400 for a bad ${e2b.…} placeholder.
const MsgMalformedPlaceholder = "Network transform header contains a malformed E2B placeholder."

// Rule is one entry of network.rules[domain]: E2B's header transform plus
// Airlock's matchers (Methods, Path: a path.Match glob on the request's
// path) and query transform. A request that matches no matcher passes
// unchanged.
type Rule struct {
	Methods   []string `json:"methods,omitempty"`
	Path      string   `json:"path,omitempty"`
	Transform struct {
		Headers map[string]string `json:"headers,omitempty"`
		Query   map[string]string `json:"query,omitempty"`
	} `json:"transform"`
}

// Rules maps a domain (lower case, no wildcard) to its rules.
type Rules map[string][]Rule

// BadRulesError is a refused rules object (a 400, its message E2B's where
// E2B has one).
type BadRulesError struct{ Msg string }

func (e *BadRulesError) Error() string { return e.Msg }

func bad(format string, args ...any) error {
	return &BadRulesError{Msg: fmt.Sprintf(format, args...)}
}

// ParseRules decodes and checks network.rules (nil for null or {}).
func ParseRules(raw json.RawMessage) (Rules, error) {
	s := bytes.TrimSpace(raw)
	if len(s) == 0 || string(s) == "null" {
		return nil, nil
	}
	var in map[string][]Rule
	dec := json.NewDecoder(bytes.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, bad("Invalid network rules: %v", err)
	}
	if len(in) == 0 {
		return nil, nil
	}
	if len(in) > MaxDomains {
		return nil, bad("Network transform rules may name at most %d domains.", MaxDomains)
	}
	out := Rules{}
	for domain, rules := range in {
		d := strings.ToLower(strings.TrimSuffix(domain, "."))
		if !validDomain(d) {
			return nil, bad("Network transform rule domain %q is not a valid domain name (no wildcards, at most %d characters).", domain, MaxDomainLen)
		}
		if _, dup := out[d]; dup {
			return nil, bad("Network transform rule domain %q is listed twice.", domain)
		}
		if len(rules) == 0 {
			continue
		}
		if len(rules) > MaxRulesPerDomain {
			return nil, bad("Network transform rules allow at most %d rule per domain (%q has %d).", MaxRulesPerDomain, domain, len(rules))
		}
		names := map[string]bool{}
		for i := range rules {
			r := &rules[i]
			if n := len(r.Transform.Headers); n > MaxHeadersPerRule {
				return nil, bad("Network transform rule for %q sets %d headers; at most %d.", domain, n, MaxHeadersPerRule)
			}
			for k, v := range r.Transform.Headers {
				if len(k) > MaxHeaderNameLen || !httpguts.ValidHeaderFieldName(k) {
					return nil, bad("Network transform header name %q is not a valid header name of at most %d characters.", k, MaxHeaderNameLen)
				}
				if len(v) > MaxHeaderValueLen || !httpguts.ValidHeaderFieldValue(v) {
					return nil, bad("Network transform header %q has an invalid value (at most %d characters).", k, MaxHeaderValueLen)
				}
				if err := placeholderNames(v, names); err != nil {
					return nil, err
				}
			}
			for k, v := range r.Transform.Query {
				if k == "" || len(k) > MaxHeaderNameLen || len(v) > MaxHeaderValueLen {
					return nil, bad("Network transform query parameter %q is empty or too long.", k)
				}
				if err := placeholderNames(v, names); err != nil {
					return nil, err
				}
			}
			for j, m := range r.Methods {
				m = strings.ToUpper(m)
				if m == "" || !httpguts.ValidHeaderFieldName(m) {
					return nil, bad("Network transform rule method %q is not an HTTP method.", m)
				}
				r.Methods[j] = m
			}
			if r.Path != "" {
				if !strings.HasPrefix(r.Path, "/") {
					return nil, bad("Network transform rule path %q must start with '/'.", r.Path)
				}
				if _, err := path.Match(r.Path, "/"); err != nil {
					return nil, bad("Network transform rule path %q is not a valid glob.", r.Path)
				}
			}
		}
		if len(names) > MaxPlaceholdersDomain {
			return nil, bad("Network transform rules for %q use %d secrets; at most %d.", domain, len(names), MaxPlaceholdersDomain)
		}
		out[d] = rules
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// SecretNames lists the secrets the rules' placeholders name (lower case,
// sorted, each once).
func (rs Rules) SecretNames() []string {
	set := map[string]bool{}
	for _, rules := range rs {
		for _, r := range rules {
			for _, v := range r.Transform.Headers {
				_ = placeholderNames(v, set)
			}
			for _, v := range r.Transform.Query {
				_ = placeholderNames(v, set)
			}
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Domains lists the ruled domains, sorted.
func (rs Rules) Domains() []string {
	out := make([]string, 0, len(rs))
	for d := range rs {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// Match returns the rules of domain that apply to a request (method, path).
func (rs Rules) Match(domain, method, reqPath string) []Rule {
	var out []Rule
	for _, r := range rs[strings.ToLower(domain)] {
		if len(r.Methods) > 0 {
			ok := false
			for _, m := range r.Methods {
				ok = ok || m == method
			}
			if !ok {
				continue
			}
		}
		if r.Path != "" {
			if ok, _ := path.Match(r.Path, reqPath); !ok {
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

func validDomain(d string) bool {
	if d == "" || len(d) > MaxDomainLen || strings.Contains(d, "*") {
		return false
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

const (
	secretPrefix   = "${e2b.secrets."
	identityPrefix = "${e2b.identity.tokens."
)

// placeholderNames adds the secret names of v's placeholders to names and
// refuses malformed ones: an unclosed "${e2b.", an empty name, a name with
// "{", "}", "$" or control characters, or an unknown kind (workload
// identity tokens are not served by Airlock).
func placeholderNames(v string, names map[string]bool) error {
	for {
		i := strings.Index(v, "${e2b.")
		if i < 0 {
			return nil
		}
		v = v[i:]
		end := strings.IndexByte(v, '}')
		if end < 0 {
			return bad(MsgMalformedPlaceholder)
		}
		ph := v[:end+1]
		switch {
		case strings.HasPrefix(ph, secretPrefix):
			name := ph[len(secretPrefix) : len(ph)-1]
			if !validPlaceholderName(name) {
				return bad(MsgMalformedPlaceholder)
			}
			names[strings.ToLower(name)] = true
		case strings.HasPrefix(ph, identityPrefix):
			return bad("Sandbox IAM workload tokens are not available for your team.")
		default:
			return bad(MsgMalformedPlaceholder)
		}
		v = v[end+1:]
	}
}

func validPlaceholderName(n string) bool {
	if n == "" {
		return false
	}
	for _, c := range n {
		if c < 0x20 || c == 0x7f || c == '{' || c == '}' || c == '$' {
			return false
		}
	}
	return true
}

// Expand fills v's ${e2b.secrets.<name>} placeholders with resolve's
// values. Errors name the secret, never a value.
func Expand(ctx context.Context, v string, resolve func(context.Context, string) ([]byte, error)) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(v, secretPrefix)
		if i < 0 {
			b.WriteString(v)
			return b.String(), nil
		}
		b.WriteString(v[:i])
		v = v[i:]
		end := strings.IndexByte(v, '}')
		if end < 0 {
			return "", bad(MsgMalformedPlaceholder)
		}
		name := strings.ToLower(v[len(secretPrefix):end])
		val, err := resolve(ctx, name)
		if err != nil {
			return "", fmt.Errorf("secret %q: %w", name, err)
		}
		b.Write(val)
		v = v[end+1:]
	}
}

// canonicalHeader is the header's canonical form, for Header.Set.
func canonicalHeader(k string) string { return http.CanonicalHeaderKey(k) }

// Clone returns a deep copy of rs (nil for none).
func (rs Rules) Clone() Rules {
	if len(rs) == 0 {
		return nil
	}
	out := make(Rules, len(rs))
	for d, rules := range rs {
		cp := make([]Rule, len(rules))
		for i, r := range rules {
			cp[i] = r
			cp[i].Methods = append([]string(nil), r.Methods...)
			cp[i].Transform.Headers = maps.Clone(r.Transform.Headers)
			cp[i].Transform.Query = maps.Clone(r.Transform.Query)
		}
		out[d] = cp
	}
	return out
}
