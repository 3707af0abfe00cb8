package network

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseDenyOut(t *testing.T) {
	pp := func(ss ...string) []netip.Prefix {
		out := []netip.Prefix{}
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	for _, c := range []struct {
		in   []string
		want []netip.Prefix
	}{
		{nil, pp()},
		{[]string{""}, pp()},
		{[]string{"none"}, pp()},
		{[]string{"NONE"}, pp()},
		{[]string{"10.0.0.0/8,192.168.1.7"}, pp("10.0.0.0/8", "192.168.1.7/32")},
		{[]string{" 172.16.5.4/12 ", "100.64.0.0/10"}, pp("172.16.0.0/12", "100.64.0.0/10")},
	} {
		got, err := ParseDenyOut("deny-out", c.in)
		if err != nil || got == nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseDenyOut(%q) = %v, %v; want %v (non-nil)", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"10.0.0.0/33"}, `invalid --deny-out entry "10.0.0.0/33": not an IPv4 address or CIDR`},
		{[]string{"10.0.0.0/8,banana"}, `invalid --deny-out entry "banana"`},
		{[]string{"fc00::/7"}, `invalid --deny-out entry "fc00::/7": only IPv4`},
		{[]string{"::ffff:10.0.0.1"}, "only IPv4"},
		{[]string{"none,10.0.0.0/8"}, `"none" cannot be combined`},
	} {
		_, err := ParseDenyOut("deny-out", c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseDenyOut(%q) error %v, want one containing %q", c.in, err, c.want)
		}
	}
}

func TestDenyOutDefaultsAndConflicts(t *testing.T) {
	c, err := Config{}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.DenyOut, DefaultDenyOut) {
		t.Errorf("default deny list %v, want %v", c.DenyOut, DefaultDenyOut)
	}
	if c, _ := (Config{DenyOut: []netip.Prefix{}}).normalize(); len(c.DenyOut) != 0 {
		t.Errorf("an empty deny list became %v", c.DenyOut)
	}
	if _, err := (Config{DenyOut: []netip.Prefix{netip.MustParsePrefix("fc00::/7")}}).normalize(); err == nil {
		t.Error("an IPv6 deny entry was accepted")
	}

	c.DenyOutExcept = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}
	allow := []netip.Prefix{
		netip.MustParsePrefix("10.2.3.4/32"),    // denied by 10/8
		netip.MustParsePrefix("10.1.2.3/32"),    // inside the exception
		netip.MustParsePrefix("203.0.113.0/24"), // public
		netip.MustParsePrefix("0.0.0.0/0"),      // overlaps every range
	}
	got := c.DenyOutConflicts(allow)
	if len(got) != 2 || !slices.Equal(got[allow[0]], []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}) ||
		len(got[allow[3]]) != len(DefaultDenyOut) {
		t.Errorf("conflicts %v, want 10.2.3.4 → 10/8 and 0.0.0.0/0 → every default range", got)
	}
	if b, ok := AlwaysBlocked(netip.MustParsePrefix("169.254.169.254/32")); !ok || b.String() != "169.254.0.0/16" {
		t.Errorf("AlwaysBlocked(metadata) = %v, %v", b, ok)
	}
	for _, cloud := range []string{"168.63.129.16/32", "100.100.100.0/24"} { // Azure WireServer, Alibaba metadata
		if _, ok := AlwaysBlocked(netip.MustParsePrefix(cloud)); !ok {
			t.Errorf("AlwaysBlocked(%s) = false", cloud)
		}
	}
	if _, ok := AlwaysBlocked(netip.MustParsePrefix("10.1.0.0/16")); ok {
		t.Error("10.1.0.0/16 reported always blocked")
	}
}
