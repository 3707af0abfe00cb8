package sandbox

import (
	"errors"
	"net/http"
	"testing"
)

// TestParseMaskRequestHost: E2B's rules (split host and optional port,
// ASCII host valid under IDNA's display profile), 400 otherwise.
func TestParseMaskRequestHost(t *testing.T) {
	for _, ok := range []string{"", "custom-host.example.com:${PORT}", "localhost:${PORT}", "example.com", "example.com:8080", "Example.COM"} {
		if got, err := ParseMaskRequestHost(ok); err != nil || got != ok {
			t.Errorf("%q: %q %v, want accepted", ok, got, err)
		}
	}
	for _, bad := range []string{"${PORT}-sandbox.example.com", "bücher.de", "a b.example.com", "under_score.com", "example.com:1:2", "[::1", "example.com/path", "example.com:${PORT}\r\nX: y"} {
		_, err := ParseMaskRequestHost(bad)
		var e *Error
		if !errors.As(err, &e) || e.Code != http.StatusBadRequest {
			t.Errorf("%q: %v, want a 400", bad, err)
		}
	}
}
