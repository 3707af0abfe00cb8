package metrics

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Defaults of Config.
const (
	DefaultInterval    = 5 * time.Second
	DefaultCapacity    = 17280 // 24 h (the longest sandbox life) at 5 s
	DefaultConcurrency = 4
)

// Target is a running sandbox to sample.
type Target struct {
	ID       string
	CPUCount int
	MemoryMB int // fallback for MemTotal when the runtime reports no limit
	DiskMB   int // fallback for DiskTotal
}

// Source lists running sandboxes and reads their resource usage.
type Source interface {
	Running() []Target
	// Stats reads one sandbox; runtime.ErrNotFound (or an error wrapping
	// it) when the sandbox is gone.
	Stats(ctx context.Context, id string) (runtime.Stats, error)
}

// Config configures a Collector. Source is required.
type Config struct {
	Source Source
	// Interval between samples of every running sandbox.
	Interval time.Duration
	// Capacity is the number of samples kept per sandbox (the oldest are
	// dropped beyond it).
	Capacity int
	// Concurrency bounds the sandboxes read at the same time.
	Concurrency int
	Logger      *slog.Logger
	// OnError is called for each failed reading of a live sandbox (optional).
	OnError func(id string, err error)
}

// Collector samples every running sandbox each Interval and keeps the
// samples in a ring buffer per sandbox until the sandbox is gone.
type Collector struct {
	cfg Config
	log *slog.Logger

	// mu guards rings.
	mu    sync.Mutex
	rings map[string]*ring
}

// NewCollector returns a Collector; call Run to start sampling.
func NewCollector(cfg Config) *Collector {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = DefaultCapacity
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Collector{cfg: cfg, log: cfg.Logger, rings: map[string]*ring{}}
}

// Interval is the sampling period.
func (c *Collector) Interval() time.Duration { return c.cfg.Interval }

// Run samples until ctx is done.
func (c *Collector) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		c.Sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sweep samples every running sandbox once and forgets sandboxes that are
// no longer running.
func (c *Collector) Sweep(ctx context.Context) {
	targets := c.cfg.Source.Running()
	live := make(map[string]bool, len(targets))
	for _, t := range targets {
		live[t.ID] = true
	}
	c.mu.Lock()
	for id := range c.rings {
		if !live[id] {
			delete(c.rings, id)
		}
	}
	c.mu.Unlock()

	sem := make(chan struct{}, c.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, t := range targets {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c.Sample(ctx, t)
		})
	}
	wg.Wait()
}

// Sample reads t now and records the reading. A sandbox that is gone is
// forgotten.
func (c *Collector) Sample(ctx context.Context, t Target) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := c.cfg.Source.Stats(ctx, t.ID)
	if err != nil {
		if errors.Is(err, runtime.ErrNotFound) {
			c.Remove(t.ID)
			return
		}
		if errors.Is(err, context.Canceled) {
			return // shutting down
		}
		c.log.Debug("sampling sandbox", "sandbox", t.ID, "err", err)
		if c.cfg.OnError != nil {
			c.cfg.OnError(t.ID, err)
		}
		return
	}
	if st.Time.IsZero() {
		st.Time = time.Now()
	}
	s := Sample{
		Time:      st.Time,
		CPUCount:  t.CPUCount,
		MemUsed:   st.MemoryUsed,
		MemTotal:  st.MemoryLimit,
		MemCache:  st.MemoryCache,
		DiskUsed:  st.DiskUsed,
		DiskTotal: st.DiskLimit,
		PIDs:      st.PIDs,
		cpuNs:     st.CPUUsageNs,
	}
	if s.MemTotal == 0 {
		s.MemTotal = uint64(t.MemoryMB) << 20
	}
	if s.DiskTotal == 0 {
		s.DiskTotal = uint64(t.DiskMB) << 20
	}
	c.record(t.ID, s)
}

// record adds s to id's ring, computing the CPU percentage from the previous
// sample. Out-of-order samples (two readings racing) are dropped.
func (c *Collector) record(id string, s Sample) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rings[id]
	if r == nil {
		r = newRing(c.cfg.Capacity)
		c.rings[id] = r
	}
	if prev, ok := r.last(); ok {
		if !s.Time.After(prev.Time) {
			return
		}
		s.CPUUsedPct = cpuPercent(prev, s)
	}
	r.add(s)
}

// cpuPercent is the CPU use between two samples as a percentage of the
// sandbox's CPUs, clamped to [0, 100].
func cpuPercent(prev, cur Sample) float64 {
	wall := cur.Time.Sub(prev.Time)
	if wall <= 0 || cur.cpuNs < prev.cpuNs {
		return 0
	}
	cpus := max(cur.CPUCount, 1)
	pct := float64(cur.cpuNs-prev.cpuNs) / float64(wall.Nanoseconds()) / float64(cpus) * 100
	return min(max(pct, 0), 100)
}

// Remove forgets id's samples.
func (c *Collector) Remove(id string) {
	c.mu.Lock()
	delete(c.rings, id)
	c.mu.Unlock()
}

// Query returns id's samples with start <= Time <= end, oldest first (an
// empty, non-nil slice when there are none).
func (c *Collector) Query(id string, start, end time.Time) []Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rings[id]
	if r == nil {
		return []Sample{}
	}
	return r.between(start, end)
}

// Latest returns the newest sample of each sandbox that has one.
func (c *Collector) Latest() map[string]Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]Sample, len(c.rings))
	for id, r := range c.rings {
		if s, ok := r.last(); ok {
			out[id] = s
		}
	}
	return out
}
