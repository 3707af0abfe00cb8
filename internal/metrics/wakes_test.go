package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestAgentWakesExposition(t *testing.T) {
	t.Parallel()
	p := NewProm(NewCollector(Config{Source: &fakeSource{}, Logger: quiet()}), func() int { return 0 })
	p.AgentWakes(func() (int64, int64) { return 5, 2 })
	rec := httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{`airlock_agent_wakes_total{via="datagram"} 5`, `airlock_agent_wakes_total{via="runsc"} 2`} {
		if !strings.Contains(body, want) {
			t.Errorf("missing %q in:\n%s", want, body)
		}
	}
}
