package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestEgressFlowEndsDroppedExposition(t *testing.T) {
	t.Parallel()
	p := NewProm(NewCollector(Config{Source: &fakeSource{}, Logger: quiet()}), func() int { return 0 })
	p.EgressFlowEndsDropped(func() uint64 { return 7 })
	rec := httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{"# TYPE airlock_egress_flow_ends_dropped_total counter", "\nairlock_egress_flow_ends_dropped_total 7\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("missing %q in:\n%s", want, body)
		}
	}
}
