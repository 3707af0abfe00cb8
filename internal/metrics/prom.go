package metrics

import (
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Create results (label "result" of airlock_sandbox_creates_total).
const (
	ResultSuccess   = "success"
	ResultUserError = "user_error" // rejected request (bad template, timeout, …)
	ResultError     = "error"      // internal failure
)

// Prom holds the daemon's Prometheus metrics.
type Prom struct {
	reg           *prometheus.Registry
	creates       *prometheus.CounterVec
	createLatency prometheus.Histogram
	errors        *prometheus.CounterVec
	stops         *prometheus.CounterVec
	steps         *prometheus.HistogramVec
}

// NewProm registers the daemon metrics: running sandboxes (running()),
// creates by result, create latency, errors by operation, per-sandbox
// resource gauges from c's newest samples, and the Go runtime/process
// collectors.
func NewProm(c *Collector, running func() int) *Prom {
	p := &Prom{
		reg: prometheus.NewRegistry(),
		creates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_sandbox_creates_total",
			Help: "Sandbox create requests by result (success, user_error, error).",
		}, []string{"result"}),
		createLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "airlock_sandbox_create_duration_seconds",
			Help:    "Time from create request to an initialised agent, successful creates only.",
			Buckets: []float64{0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 30, 60},
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_errors_total",
			Help: "Internal errors by operation (create, sample).",
		}, []string{"op"}),
		stops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_sandbox_unexpected_stops_total",
			Help: "Sandboxes that stopped on their own, by reason (memory, tasks, unknown).",
		}, []string{"reason"}),
		steps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "airlock_sandbox_step_seconds",
			Help: "Time of each forward step of a sandbox operation (op: create, pause, resume, …; kind: cold, restore, pool, …; step: network, restore, wait, …; names in internal/sandbox/doc.go), successful steps only.",
			// 0.5 ms to ~40 s, ×1.6 per bucket: fine enough for p50/p99 of
			// steps that take a millisecond as well as of a cold boot.
			Buckets: prometheus.ExponentialBuckets(0.0005, 1.6, 25),
		}, []string{"op", "kind", "step"}),
	}
	for _, r := range []string{ResultSuccess, ResultUserError, ResultError} {
		p.creates.WithLabelValues(r)
	}
	for _, op := range []string{"create", "sample"} {
		p.errors.WithLabelValues(op)
	}
	p.reg.MustRegister(
		p.creates, p.createLatency, p.errors, p.stops, p.steps,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "airlock_sandboxes_running",
			Help: "Sandboxes currently running.",
		}, func() float64 { return float64(running()) }),
		&sandboxGauges{c: c},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return p
}

// Handler serves the text exposition format.
func (p *Prom) Handler() http.Handler {
	return promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{Registry: p.reg})
}

// ObserveCreate records one create request.
func (p *Prom) ObserveCreate(result string, elapsed time.Duration) {
	p.creates.WithLabelValues(result).Inc()
	switch result {
	case ResultSuccess:
		p.createLatency.Observe(elapsed.Seconds())
	case ResultError:
		p.errors.WithLabelValues("create").Inc()
	}
}

// ObserveStep records one forward step of a sandbox operation.
func (p *Prom) ObserveStep(op, kind, step string, elapsed time.Duration) {
	p.steps.WithLabelValues(op, kind, step).Observe(elapsed.Seconds())
}

// Stopped counts a sandbox that stopped on its own; reason is the
// runtime's phrase ("" when unknown).
func (p *Prom) Stopped(reason string) {
	label := "unknown"
	switch {
	case strings.Contains(reason, "memory"):
		label = "memory"
	case strings.Contains(reason, "task"):
		label = "tasks"
	}
	p.stops.WithLabelValues(label).Inc()
}

// Error counts an internal error of op.
func (p *Prom) Error(op string) { p.errors.WithLabelValues(op).Inc() }

var (
	descCPU = prometheus.NewDesc("airlock_sandbox_cpu_used_percent",
		"CPU use of the sandbox over the last sampling interval, percent of its CPUs.", []string{"sandbox_id"}, nil)
	descCPUCount = prometheus.NewDesc("airlock_sandbox_cpu_count",
		"CPUs of the sandbox.", []string{"sandbox_id"}, nil)
	descMem = prometheus.NewDesc("airlock_sandbox_memory_used_bytes",
		"Memory used inside the sandbox.", []string{"sandbox_id"}, nil)
	descMemLimit = prometheus.NewDesc("airlock_sandbox_memory_limit_bytes",
		"Memory limit of the sandbox.", []string{"sandbox_id"}, nil)
	descDisk = prometheus.NewDesc("airlock_sandbox_disk_used_bytes",
		"Bytes used in the sandbox's writable layer.", []string{"sandbox_id"}, nil)
	descDiskLimit = prometheus.NewDesc("airlock_sandbox_disk_limit_bytes",
		"Size of the sandbox's writable layer.", []string{"sandbox_id"}, nil)
	descPIDs = prometheus.NewDesc("airlock_sandbox_tasks",
		"Tasks (processes and threads) inside the sandbox.", []string{"sandbox_id"}, nil)
)

// sandboxGauges exports the newest sample of every sandbox.
type sandboxGauges struct{ c *Collector }

func (g *sandboxGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCPU, descCPUCount, descMem, descMemLimit, descDisk, descDiskLimit, descPIDs} {
		ch <- d
	}
}

func (g *sandboxGauges) Collect(ch chan<- prometheus.Metric) {
	for id, s := range g.c.Latest() {
		for _, v := range []struct {
			d *prometheus.Desc
			v float64
		}{
			{descCPU, s.CPUUsedPct},
			{descCPUCount, float64(s.CPUCount)},
			{descMem, float64(s.MemUsed)},
			{descMemLimit, float64(s.MemTotal)},
			{descDisk, float64(s.DiskUsed)},
			{descDiskLimit, float64(s.DiskTotal)},
			{descPIDs, float64(s.PIDs)},
		} {
			ch <- prometheus.MustNewConstMetric(v.d, prometheus.GaugeValue, v.v, id)
		}
	}
}
