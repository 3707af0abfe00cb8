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
