//go:build linux

package vminit

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestRandPoolInfo(t *testing.T) {
	seed := bytes.Repeat([]byte{0xab}, reseedBytes)
	b := randPoolInfo(seed)
	if len(b) != 8+reseedBytes {
		t.Fatalf("len = %d, want %d", len(b), 8+reseedBytes)
	}
	if bits := binary.NativeEndian.Uint32(b[0:4]); bits != reseedBytes*8 {
		t.Errorf("entropy_count = %d, want %d (every bit credited)", bits, reseedBytes*8)
	}
	if n := binary.NativeEndian.Uint32(b[4:8]); n != reseedBytes {
		t.Errorf("buf_size = %d, want %d", n, reseedBytes)
	}
	if !bytes.Equal(b[8:], seed) {
		t.Errorf("buf does not hold the seed")
	}
}
