package nflog

import (
	"net/netip"
	"testing"
)

func TestParseIPv4(t *testing.T) {
	// TCP SYN 10.84.0.2:40000 → 192.0.2.7:443, IHL 5.
	b := make([]byte, 40)
	b[0] = 0x45
	b[9] = 6
	copy(b[12:], []byte{10, 84, 0, 2})
	copy(b[16:], []byte{192, 0, 2, 7})
	b[20], b[21] = 0x9c, 0x40
	b[22], b[23] = 0x01, 0xbb
	f, ok := ParseIPv4(b)
	if !ok || f.Protocol != "tcp" || f.Port != 443 || f.Dst != netip.MustParseAddr("192.0.2.7") || f.Src != netip.MustParseAddr("10.84.0.2") {
		t.Fatalf("tcp: %+v %v", f, ok)
	}
	// Options (IHL 6) shift the port.
	b2 := make([]byte, 44)
	copy(b2, b[:20])
	b2[0] = 0x46
	b2[9] = 17
	b2[26], b2[27] = 0, 53
	if f, ok := ParseIPv4(b2); !ok || f.Protocol != "udp" || f.Port != 53 {
		t.Errorf("udp with options: %+v %v", f, ok)
	}
	// A later fragment has no ports; odd protocols are numbered.
	b[6] = 0x00
	b[7] = 0x10
	if f, _ := ParseIPv4(b); f.Port != 0 {
		t.Errorf("fragment port %d", f.Port)
	}
	b[9] = 47
	if f, _ := ParseIPv4(b); f.Protocol != "47" {
		t.Errorf("gre = %q", f.Protocol)
	}
	for _, bad := range [][]byte{nil, make([]byte, 19), append([]byte{0x65}, make([]byte, 39)...), append([]byte{0x4f}, make([]byte, 30)...)} {
		if _, ok := ParseIPv4(bad); ok {
			t.Errorf("accepted %x", bad)
		}
	}
}
