//go:build linux

package nflog

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

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

// A group already bound is refused with EPERM, which the network manager
// retries for a while after a restart (audit_linux.go); the group is free
// again once the first socket is closed. Needs root (CAP_NET_ADMIN).
func TestBindTwiceIsEPERM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (CAP_NET_ADMIN) to bind an NFLOG group; run as root like scripts/test.sh")
	}
	const group = 39871
	a, err := Open(group, 64)
	if err != nil {
		t.Fatalf("first bind: %v", err)
	}
	if _, err := Open(group, 64); !errors.Is(err, unix.EPERM) {
		a.Close()
		t.Fatalf("second bind of a bound group: %v, want EPERM", err)
	}
	a.Close()
	b, err := Open(group, 64)
	if err != nil {
		t.Fatalf("bind after close: %v", err)
	}
	b.Close()
}
