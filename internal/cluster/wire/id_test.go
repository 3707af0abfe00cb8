package wire_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cluster/wire"
)

func TestValidID(t *testing.T) {
	for _, id := range []string{"a", "i0123456789abcdefghij", strings.Repeat("z", 64), "boot0", "0"} {
		if err := wire.ValidID(id); err != nil {
			t.Errorf("ValidID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", strings.Repeat("z", 65), "A", "a-b", "a.b", "a/b", "../x", "é", "a b", "a\x00"} {
		if err := wire.ValidID(id); err == nil {
			t.Errorf("ValidID(%q) = nil, want an error", id)
		}
	}
}

func TestIDChars(t *testing.T) {
	if !wire.IDChars(strings.Repeat("a0", 100)) || wire.IDChars("") || wire.IDChars("a-b") || wire.IDChars("A") {
		t.Error("IDChars accepts exactly the non-empty strings of [a-z0-9]")
	}
}
