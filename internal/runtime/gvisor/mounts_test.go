//go:build linux

package gvisor

import "testing"

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:               "/plain",
		`/with\040space`:       "/with space",
		`/tab\011and\134slash`: "/tab\tand\\slash",
		`/trailing\04`:         `/trailing\04`,
	} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
