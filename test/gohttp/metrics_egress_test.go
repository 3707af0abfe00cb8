//go:build e2e

package gohttp

import "testing"

// TestEgressFlowEndsDroppedMetric: the daemon's /metrics reports the
// ended egress flows its conntrack reader dropped (a full queue), so an
// operator sees an egress audit or activity feed with missing flow ends.
func TestEgressFlowEndsDroppedMetric(t *testing.T) {
	const name = "airlock_egress_flow_ends_dropped_total"
	v, ok := scrapeMetrics(t, loadEnv(t))[name]
	if !ok {
		t.Fatalf("%s not in /metrics", name)
	}
	if v < 0 {
		t.Fatalf("%s = %v", name, v)
	}
}
