package network

import (
	"errors"
	"net/netip"
	"reflect"
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

	for _, d := range []string{"example.com", "*.example.com", "a-b.c.example.org"} {
		if _, err := ParseEgress([]string{d}, nil); !errors.Is(err, ErrDomainRule) {
			t.Errorf("ParseEgress(%q) = %v, want ErrDomainRule", d, err)
		}
	}
	for _, bad := range []string{"", "10.0.0.1/33", "10.0.0.300", "::1", "2001:db8::/32", "not a host", "-", "*"} {
		_, err := ParseEgress(nil, []string{bad})
		if err == nil || errors.Is(err, ErrDomainRule) {
			t.Errorf("ParseEgress(deny %q) = %v, want a plain error", bad, err)
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
