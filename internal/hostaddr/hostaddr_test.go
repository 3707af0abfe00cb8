package hostaddr

import (
	"errors"
	"net"
	"net/netip"
	"testing"
)

func TestOwn(t *testing.T) {
	list := func() ([]net.Addr, error) {
		return []net.Addr{&net.IPNet{IP: net.ParseIP("192.0.2.7").To16(), Mask: net.CIDRMask(24, 32)}}, nil
	}
	if !Own(netip.MustParseAddr("192.0.2.7"), list) {
		t.Error("192.0.2.7 is the host's")
	}
	if !Own(netip.MustParseAddr("::ffff:192.0.2.7"), list) {
		t.Error("a mapped form of the host's address is the host's")
	}
	if Own(netip.MustParseAddr("192.0.2.8"), list) {
		t.Error("192.0.2.8 is not the host's")
	}
	if Own(netip.MustParseAddr("192.0.2.7"), func() ([]net.Addr, error) { return nil, errors.New("no") }) {
		t.Error("a failing list reports false")
	}
	if !Own(netip.MustParseAddr("127.0.0.1"), nil) {
		t.Error("127.0.0.1 is on lo")
	}
}

func TestSpecialAndPrivate(t *testing.T) {
	for _, c := range []struct {
		addr             string
		special, private bool
	}{
		{"127.0.0.1", true, false},
		{"::ffff:127.0.0.1", true, false},
		{"0.0.0.0", true, false},
		{"169.254.169.254", true, false},
		{"fe80::1", true, false},
		{"224.0.0.1", true, false},
		{"10.1.2.3", false, true},
		{"192.168.1.1", false, true},
		{"fd00::1", false, true},
		{"100.64.0.1", false, true},
		{"8.8.8.8", false, false},
		{"2001:4860:4860::8888", false, false},
	} {
		a := netip.MustParseAddr(c.addr)
		if got := Special(a) != ""; got != c.special {
			t.Errorf("Special(%s) = %q, want refused=%v", c.addr, Special(a), c.special)
		}
		if got := Private(a) != ""; got != c.private {
			t.Errorf("Private(%s) = %q, want refused=%v", c.addr, Private(a), c.private)
		}
	}
}
