package metrics

import "github.com/prometheus/client_golang/prometheus"

// AgentWakes registers airlock_agent_wakes_total{via}: how the runtime woke
// sandbox agents (after a restore, for the OOM guard), by datagram to the
// agent's wake port or by the `runsc kill` fallback, as counts reports them.
func (p *Prom) AgentWakes(counts func() (datagram, runsc int64)) {
	opts := func(via string) prometheus.CounterOpts {
		return prometheus.CounterOpts{
			Name:        "airlock_agent_wakes_total",
			Help:        "Agent wake-ups (listen again after a restore, OOM guard) by how they were sent: datagram (the agent's wake port) or runsc (the `runsc kill` fallback).",
			ConstLabels: prometheus.Labels{"via": via},
		}
	}
	p.reg.MustRegister(
		prometheus.NewCounterFunc(opts("datagram"), func() float64 { d, _ := counts(); return float64(d) }),
		prometheus.NewCounterFunc(opts("runsc"), func() float64 { _, r := counts(); return float64(r) }),
	)
}
