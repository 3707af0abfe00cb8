package network

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestParseEgress(t *testing.T) {
	e, err := ParseEgress([]string{"10.78.9.2", " 192.0.2.0/24 "}, []string{"0.0.0.0/0", "198.51.100.7/16"})
	if err != nil {
		t.Fatal(err)
	}
	want := Egress{
		Allow: []netip.Prefix{netip.MustParsePrefix("10.78.9.2/32"), netip.MustParsePrefix("192.0.2.0/24")},
		Deny:  []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("198.51.0.0/16")},
	}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("ParseEgress = %v, want %v", e, want)
	}
	allow, deny := e.Strings()
	if !reflect.DeepEqual(allow, []string{"10.78.9.2", "192.0.2.0/24"}) || !reflect.DeepEqual(deny, []string{"0.0.0.0/0", "198.51.0.0/16"}) {
		t.Errorf("Strings = %v %v", allow, deny)
	}
	if e.Empty() || !(Egress{}).Empty() {
		t.Error("Empty is wrong")
	}

	d, err := ParseEgress([]string{"Example.COM.", "*.x.test", "10.0.0.1"}, []string{"a-b.c.example.org", "0.0.0.0/0"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.AllowDomains, []string{"example.com", "*.x.test"}) || !reflect.DeepEqual(d.DenyDomains, []string{"a-b.c.example.org"}) {
		t.Errorf("domains = %v / %v", d.AllowDomains, d.DenyDomains)
	}
	allow, deny = d.Strings()
	if !reflect.DeepEqual(allow, []string{"10.0.0.1", "example.com", "*.x.test"}) || !reflect.DeepEqual(deny, []string{"0.0.0.0/0", "a-b.c.example.org"}) {
		t.Errorf("Strings with domains = %v %v", allow, deny)
	}
	if (Egress{DenyDomains: []string{"a.b"}}).Empty() {
		t.Error("a domain-only policy is Empty")
	}
	for _, bad := range []string{"", "10.0.0.1/33", "10.0.0.300", "::1", "2001:db8::/32", "not a host", "-", "*",
		"*.com.*", "a..b", "-a.com", "a-.com", "foo_bar.com", "*.*.com", "x.*.com", "exa mple.com", "é.com",
		"localhost", "*.", strings.Repeat("a", 64) + ".com", strings.Repeat("abcdefgh.", 30) + "com", "1.2.3.4.5"} {
		_, err := ParseEgress(nil, []string{bad})
		if err == nil {
			t.Errorf("ParseEgress(deny %q) accepted", bad)
		}
	}
	many := make([]string, MaxEgressRules+1)
	for i := range many {
		many[i] = "10.0.0.1"
	}
	if _, err := ParseEgress(many, nil); err == nil {
		t.Error("too many entries accepted")
	}
}

func TestParseDomain(t *testing.T) {
	for in, want := range map[string]string{
		"example.com": "example.com", "EXAMPLE.com.": "example.com", "*.x.test": "*.x.test",
		" a1-b.example.co ": "a1-b.example.co", "xn--bcher-kva.example": "xn--bcher-kva.example",
	} {
		got, err := ParseDomain(in)
		if err != nil || got != want {
			t.Errorf("ParseDomain(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestDecideName(t *testing.T) {
	e, err := ParseEgress([]string{"allowed.test", "*.x.test", "10.1.0.0/16"}, []string{"bad.x.test", "denied.test", "0.0.0.0/0"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		internet bool
		allow    bool
		learn    bool
		rule     string
	}{
		{"allowed.test", true, true, true, "allowOut allowed.test"},
		{"ALLOWED.test.", true, true, true, "allowOut allowed.test"},
		{"a.x.test", true, true, true, "allowOut *.x.test"},
		{"a.b.x.test", true, true, true, "allowOut *.x.test"},
		{"bad.x.test", true, true, true, "allowOut *.x.test"}, // allowOut wins
		{"x.test", true, false, false, "not in allowOut"},     // the wildcard is for names below
		{"denied.test", true, false, false, "denyOut denied.test"},
		{"ax.test", true, false, false, "not in allowOut"},
		{"other.test", true, false, false, "not in allowOut"},
	}
	for _, c := range cases {
		v := e.DecideName(c.name, c.internet)
		if v.Allow != c.allow || v.Learn != c.learn || v.Rule != c.rule {
			t.Errorf("DecideName(%q) = %+v, want allow=%v learn=%v rule=%q", c.name, v, c.allow, c.learn, c.rule)
		}
	}
	// Without a catch-all deny, unknown names resolve (CIDR rules decide).
	open, _ := ParseEgress([]string{"allowed.test"}, []string{"denied.test"})
	if v := open.DecideName("other.test", true); !v.Allow || v.Learn || v.Rule != "default" {
		t.Errorf("open policy: other.test = %+v", v)
	}
	if v := open.DecideName("other.test", false); v.Allow {
		t.Errorf("internet off: other.test = %+v, want refused", v)
	}
	if v := open.DecideName("denied.test", true); v.Allow {
		t.Errorf("open policy: denied.test = %+v", v)
	}
}
