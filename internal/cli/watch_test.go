package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func TestFormatActivity(t *testing.T) {
	line := formatActivity(airlock.ActivityEntry{ID: 7, Time: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC), Type: "egress.connect",
		Data: map[string]any{"verdict": "denied", "ip": "10.0.0.1", "rule": "denyOut 10.0.0.1", "port": 80}})
	for _, want := range []string{"7 ", "egress.connect", "ip=10.0.0.1", "port=80", `rule="denyOut 10.0.0.1"`, "verdict=denied"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	if strings.Index(line, "ip=") > strings.Index(line, "verdict=") {
		t.Errorf("keys not sorted: %q", line)
	}
}
