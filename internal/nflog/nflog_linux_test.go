//go:build linux

package nflog

import "testing"

func TestParsePacket(t *testing.T) {
	// NFULA_IFINDEX_INDEV=7, NFULA_PREFIX="a|internet\0", NFULA_PAYLOAD=4 bytes.
	b := []byte{
		8, 0, 4, 0, 0, 0, 0, 7,
		15, 0, 10, 0, 'a', '|', 'i', 'n', 't', 'e', 'r', 'n', 'e', 't', 0, 0,
		8, 0, 9, 0, 1, 2, 3, 4,
	}
	p, ok := parsePacket(b)
	if !ok || p.InDev != 7 || p.Prefix != "a|internet" || string(p.Payload) != "\x01\x02\x03\x04" {
		t.Fatalf("parsePacket = %+v %v", p, ok)
	}
}
