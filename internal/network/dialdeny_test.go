package network

import (
	"net/netip"
	"testing"
)

func TestDenies(t *testing.T) {
	c := Config{Subnet: netip.MustParsePrefix("10.77.0.0/16"), DenyOutExcept: []netip.Prefix{netip.MustParsePrefix("192.168.5.0/24")}}
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "169.254.169.254": true, "10.1.2.3": true, "10.77.0.2": true, "172.16.0.1": true,
		"192.168.1.1": true, "192.168.5.7": false, "100.64.0.1": true, "0.0.0.0": true, "8.8.8.8": false,
		"::1": true, "fe80::1": true, "fd00::1": true, "::ffff:127.0.0.1": true, "64:ff9b::a00:1": true,
		"2002:a00:1::": true, "2606:4700::1111": false, "::": true, "ff02::1": true,
	} {
		if _, got := c.Denies(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Denies(%s) = %v, want %v", addr, got, want)
		}
	}
	// --deny-out none opens the private ranges, never loopback or metadata.
	open := Config{DenyOut: []netip.Prefix{}}
	if _, d := open.Denies(netip.MustParseAddr("10.1.2.3")); d {
		t.Error("--deny-out none still denies 10.1.2.3")
	}
	if _, d := open.Denies(netip.MustParseAddr("169.254.169.254")); !d {
		t.Error("--deny-out none opens the metadata address")
	}
}
