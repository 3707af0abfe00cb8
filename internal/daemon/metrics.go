package daemon

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// daemonMetrics wires the metrics collector and the Prometheus registry to
// the sandbox manager: it is the manager's Observer and the collector's
// Source.
type daemonMetrics struct {
	ctx  context.Context
	m    *sandbox.Manager // set by attach
	col  *metrics.Collector
	prom *metrics.Prom
	// closeIdle drops the proxy's idle connections to sandboxes (optional):
	// a removed sandbox's network namespace vanishes without closing them,
	// and the next sandbox on the same address would answer them with RST.
	closeIdle func()
	// overview feeds the web console's overview charts (optional).
	overview *metrics.Overview
}

func newDaemonMetrics(ctx context.Context, interval time.Duration, log *slog.Logger) *daemonMetrics {
	d := &daemonMetrics{ctx: ctx}
	d.col = metrics.NewCollector(metrics.Config{
		Source:   d,
		Interval: interval,
		Logger:   log,
		OnError:  func(string, error) { d.prom.Error("sample") },
	})
	d.prom = metrics.NewProm(d.col, func() int { return len(d.Running()) })
	return d
}

// attach starts sampling m's sandboxes until ctx is done. (Sandboxes that
// stop on their own are found by Manager.Reap, started by serve.)
func (d *daemonMetrics) attach(m *sandbox.Manager) {
	d.m = m
	go d.col.Run(d.ctx)
}

// Running implements metrics.Source.
func (d *daemonMetrics) Running() []metrics.Target {
	if d.m == nil {
		return nil
	}
	var out []metrics.Target
	for _, sb := range d.m.List() {
		if sb.State != sandbox.StateRunning {
			continue
		}
		out = append(out, target(sb))
	}
	return out
}

func target(sb *sandbox.Sandbox) metrics.Target {
	return metrics.Target{ID: sb.ID, CPUCount: sb.CPUCount, MemoryMB: sb.MemoryMB, DiskMB: sb.DiskSizeMB}
}

// Stats implements metrics.Source.
func (d *daemonMetrics) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	e, err := d.m.Lookup(id)
	var st runtime.Stats
	if err == nil {
		st, err = e.Stats(ctx)
	}
	if sandbox.IsNotFound(err) {
		return st, runtime.ErrNotFound
	}
	return st, err
}

// Created implements sandbox.Observer: counts the create and takes the
// sandbox's first sample right away.
func (d *daemonMetrics) Created(sb *sandbox.Sandbox, elapsed time.Duration) {
	d.prom.ObserveCreate(metrics.ResultSuccess, elapsed)
	if d.overview != nil {
		d.overview.ObserveCreate(time.Now(), elapsed, true)
	}
	t := target(sb)
	go d.col.Sample(d.ctx, t)
}

// CreateFailed implements sandbox.Observer.
func (d *daemonMetrics) CreateFailed(err error, elapsed time.Duration) {
	if d.overview != nil {
		d.overview.ObserveCreate(time.Now(), elapsed, false)
	}
	if _, ok := sandbox.AsUserError(err); ok || errors.Is(err, context.Canceled) {
		d.prom.ObserveCreate(metrics.ResultUserError, elapsed)
		return
	}
	d.prom.ObserveCreate(metrics.ResultError, elapsed)
}

var _ sandbox.StepObserver = (*daemonMetrics)(nil)

// Step implements sandbox.StepObserver.
func (d *daemonMetrics) Step(op, kind, step string, elapsed time.Duration) {
	d.prom.ObserveStep(op, kind, step, elapsed)
}

// Removed implements sandbox.Observer.
func (d *daemonMetrics) Removed(id string) {
	d.col.Remove(id)
	if d.closeIdle != nil {
		d.closeIdle()
	}
}

// Stopped implements sandbox.Observer.
func (d *daemonMetrics) Stopped(id, reason string) {
	d.prom.Stopped(reason)
	d.col.Remove(id)
}

// sandboxCounts returns the number of m's sandboxes per state.
func sandboxCounts(m *sandbox.Manager) map[string]int {
	out := map[string]int{sandbox.StateRunning: 0, sandbox.StatePaused: 0}
	for _, sb := range m.List() {
		out[sb.State]++
	}
	return out
}
