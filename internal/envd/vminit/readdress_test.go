//go:build linux

package vminit

import "testing"

func TestParseAddress(t *testing.T) {
	p, g, err := ParseAddress("10.86.0.6/30", "10.86.0.5")
	if err != nil || p.String() != "10.86.0.6/30" || g.String() != "10.86.0.5" {
		t.Fatalf("ParseAddress = %v %v %v", p, g, err)
	}
	for _, c := range [][2]string{
		{"10.86.0.6", "10.86.0.5"},    // no prefix length
		{"fd00::6/64", "fd00::1"},     // not IPv4
		{"10.86.0.6/30", "10.86.0.9"}, // gateway outside the subnet
		{"10.86.0.6/30", "not-an-ip"}, // bad gateway
		{"garbage", "10.86.0.5"},      // bad address
	} {
		if _, _, err := ParseAddress(c[0], c[1]); err == nil {
			t.Errorf("ParseAddress(%q, %q) succeeded", c[0], c[1])
		}
	}
}
