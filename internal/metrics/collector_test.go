package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// fakeSource serves scripted readings.
type fakeSource struct {
	mu      sync.Mutex
	targets []Target
	stats   map[string]runtime.Stats
	err     map[string]error
}

func (f *fakeSource) Running() []Target {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Target(nil), f.targets...)
}

func (f *fakeSource) Stats(_ context.Context, id string) (runtime.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.err[id]; err != nil {
		return runtime.Stats{}, err
	}
	st, ok := f.stats[id]
	if !ok {
		return runtime.Stats{}, fmt.Errorf("wrapped: %w", runtime.ErrNotFound)
	}
	return st, nil
}

func (f *fakeSource) set(id string, st runtime.Stats) {
	f.mu.Lock()
	f.stats[id] = st
	f.mu.Unlock()
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestRingWrapsAndFilters(t *testing.T) {
	t.Parallel()
	r := newRing(3)
	base := time.Unix(1000, 0)
	for i := range 5 {
		r.add(Sample{Time: base.Add(time.Duration(i) * time.Second), PIDs: uint64(i)})
	}
	all := r.between(base, base.Add(time.Hour))
	if len(all) != 3 || all[0].PIDs != 2 || all[2].PIDs != 4 {
		t.Fatalf("after 5 adds to a ring of 3 got %+v, want samples 2,3,4 in order", all)
	}
	if last, _ := r.last(); last.PIDs != 4 {
		t.Fatalf("last = %d, want 4", last.PIDs)
	}
	mid := r.between(base.Add(3*time.Second), base.Add(3*time.Second))
	if len(mid) != 1 || mid[0].PIDs != 3 {
		t.Fatalf("window [3s,3s] = %+v, want sample 3", mid)
	}
	if got := r.between(base.Add(-time.Hour), base.Add(-time.Minute)); got == nil || len(got) != 0 {
		t.Fatalf("window in the past = %#v, want empty non-nil", got)
	}
}

func TestCollectorCPUPercentAndLimits(t *testing.T) {
	t.Parallel()
	src := &fakeSource{stats: map[string]runtime.Stats{}, targets: []Target{{ID: "a", CPUCount: 2, MemoryMB: 512, DiskMB: 100}}}
	c := NewCollector(Config{Source: src, Logger: quiet()})
	t0 := time.Unix(2000, 0)
	src.set("a", runtime.Stats{Time: t0, CPUUsageNs: 1e9, MemoryUsed: 10 << 20})
	c.Sweep(context.Background())
	// 1 s of CPU over 2 s of wall on 2 CPUs = 25 %.
	src.set("a", runtime.Stats{Time: t0.Add(2 * time.Second), CPUUsageNs: 2e9, MemoryUsed: 20 << 20, MemoryLimit: 256 << 20, DiskUsed: 4096, DiskLimit: 1 << 30})
	c.Sweep(context.Background())
	got := c.Query("a", t0, t0.Add(time.Minute))
	if len(got) != 2 {
		t.Fatalf("got %d samples, want 2", len(got))
	}
	first, second := got[0], got[1]
	if first.CPUUsedPct != 0 || first.MemTotal != 512<<20 || first.DiskTotal != 100<<20 {
		t.Fatalf("first sample %+v: want 0%% CPU and the target's limits as fallback", first)
	}
	if second.CPUUsedPct != 25 || second.MemUsed != 20<<20 || second.MemTotal != 256<<20 || second.DiskTotal != 1<<30 || second.CPUCount != 2 {
		t.Fatalf("second sample %+v: want 25%% CPU and the runtime's limits", second)
	}
	// A reading older than the newest is dropped; a counter reset reads 0 %.
	src.set("a", runtime.Stats{Time: t0.Add(time.Second), CPUUsageNs: 9e9})
	c.Sweep(context.Background())
	src.set("a", runtime.Stats{Time: t0.Add(3 * time.Second), CPUUsageNs: 1})
	c.Sweep(context.Background())
	got = c.Query("a", t0, t0.Add(time.Minute))
	if len(got) != 3 || got[2].CPUUsedPct != 0 {
		t.Fatalf("got %+v, want the stale reading dropped and 0%% after a reset", got)
	}
}

func TestCollectorForgetsGoneSandboxes(t *testing.T) {
	t.Parallel()
	var sampleErrs int
	src := &fakeSource{stats: map[string]runtime.Stats{}, err: map[string]error{},
		targets: []Target{{ID: "a", CPUCount: 1}, {ID: "b", CPUCount: 1}, {ID: "c", CPUCount: 1}}}
	c := NewCollector(Config{Source: src, Logger: quiet(), OnError: func(string, error) { sampleErrs++ }, Concurrency: 1})
	now := time.Now()
	src.set("a", runtime.Stats{Time: now})
	src.set("b", runtime.Stats{Time: now})
	src.err["c"] = errors.New("runsc events: boom")
	c.Sweep(context.Background())
	if l := c.Latest(); len(l) != 2 || sampleErrs != 1 {
		t.Fatalf("latest %v, errors %d: want a and b sampled and one error for c", l, sampleErrs)
	}
	// b leaves the running list; a vanishes from the runtime.
	src.mu.Lock()
	src.targets = []Target{{ID: "a", CPUCount: 1}}
	delete(src.stats, "a")
	src.mu.Unlock()
	c.Sweep(context.Background())
	if l := c.Latest(); len(l) != 0 {
		t.Fatalf("latest %v, want nothing left", l)
	}
	c.Remove("nonexistent") // no panic
}

func TestPromExposition(t *testing.T) {
	t.Parallel()
	src := &fakeSource{stats: map[string]runtime.Stats{"sbx1": {Time: time.Now(), MemoryUsed: 123456}},
		targets: []Target{{ID: "sbx1", CPUCount: 2}}}
	c := NewCollector(Config{Source: src, Logger: quiet()})
	c.Sweep(context.Background())
	p := NewProm(c, func() int { return 7 })
	p.ObserveCreate(ResultSuccess, 1500*time.Millisecond)
	p.ObserveCreate(ResultError, time.Second)
	p.ObserveCreate(ResultUserError, time.Millisecond)
	rec := httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		"airlock_sandboxes_running 7",
		`airlock_sandbox_creates_total{result="success"} 1`,
		`airlock_sandbox_creates_total{result="error"} 1`,
		`airlock_sandbox_creates_total{result="user_error"} 1`,
		"airlock_sandbox_create_duration_seconds_count 1",
		`airlock_sandbox_create_duration_seconds_bucket{le="2"} 1`,
		`airlock_sandbox_create_duration_seconds_bucket{le="1"} 0`,
		`airlock_errors_total{op="create"} 1`,
		`airlock_sandbox_memory_used_bytes{sandbox_id="sbx1"} 123456`,
		`airlock_sandbox_cpu_count{sandbox_id="sbx1"} 2`,
		"go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", body)
	}
}
