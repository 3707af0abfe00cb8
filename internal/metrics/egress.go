package metrics

import "github.com/prometheus/client_golang/prometheus"

// EgressFlowEndsDropped registers airlock_egress_flow_ends_dropped_total:
// ended egress flows the network manager's conntrack reader did not
// publish (to the egress audit and the activity feed) because its queue
// was full, as dropped reports them (network.Manager.FlowEndsDropped).
func (p *Prom) EgressFlowEndsDropped(dropped func() uint64) {
	p.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "airlock_egress_flow_ends_dropped_total",
		Help: "Ended egress flows not reported (egress audit, activity feed) because the conntrack reader's queue was full.",
	}, func() float64 { return float64(dropped()) }))
}
