package metrics

import (
	"testing"
	"time"
)

func TestOverviewCreates(t *testing.T) {
	t.Parallel()
	o := NewOverview(t.TempDir(), time.Hour, nil)
	now := time.Date(2026, 1, 2, 3, 4, 30, 0, time.UTC)
	o.ObserveCreate(now.Add(-2*time.Hour), time.Second, true) // outside the window
	o.ObserveCreate(now.Add(-5*time.Minute), 2*time.Second, true)
	for i := range 98 {
		o.ObserveCreate(now, time.Duration(i+1)*10*time.Millisecond, true)
	}
	o.ObserveCreate(now, 5*time.Second, false)
	s := o.Snapshot(now)
	if len(s.CreatesPerMinute) != 60 {
		t.Fatalf("%d minutes, want 60", len(s.CreatesPerMinute))
	}
	if got := s.CreatesPerMinute[59]; got.TimestampUnix != now.Truncate(time.Minute).Unix() || got.Creates != 99 || got.Failed != 1 {
		t.Errorf("last minute %+v, want 99 creates (1 failed) at the current minute", got)
	}
	if got := s.CreatesPerMinute[54]; got.Creates != 1 {
		t.Errorf("5 minutes ago %+v, want 1 create", got)
	}
	total := 0
	for _, m := range s.CreatesPerMinute {
		total += m.Creates
	}
	if total != 100 {
		t.Errorf("%d creates in the hour, want 100 (the 2 h old one dropped)", total)
	}
	// 99 successful: 10 ms … 980 ms and 2 s (nearest rank: p99 of 99 is the largest); failed ones do not count.
	if s.CreateLatency.Count != 99 || s.CreateLatency.P50 != 0.5 || s.CreateLatency.P99 != 2 {
		t.Errorf("latency %+v, want count 99, p50 0.5, p99 2", s.CreateLatency)
	}
}

func TestOverviewHostSamples(t *testing.T) {
	t.Parallel()
	o := NewOverview(t.TempDir(), time.Hour, nil)
	now := time.Now()
	for i := range hostKeep + 5 {
		o.SampleHost(now.Add(time.Duration(i) * time.Second))
	}
	s := o.Snapshot(now)
	if len(s.Host) != hostKeep {
		t.Fatalf("%d host samples, want %d", len(s.Host), hostKeep)
	}
	h := s.Host[len(s.Host)-1]
	if h.MemTotal == 0 || h.MemUsed == 0 || h.MemUsed > h.MemTotal || h.DiskTotal == 0 || h.DiskUsed > h.DiskTotal || h.CPUPct < 0 || h.CPUPct > 100 {
		t.Errorf("implausible host sample %+v", h)
	}
}

func TestParseHostFiles(t *testing.T) {
	t.Parallel()
	c, err := parseCPU([]byte("cpu  100 10 50 800 40 0 0 0 0 0\ncpu0 1 2 3 4\n"))
	if err != nil || c.total != 1000 || c.busy != 160 {
		t.Fatalf("parseCPU = %+v, %v; want total 1000 busy 160", c, err)
	}
	if p := (cpuTimes{busy: 260, total: 1200}).percentSince(c); p != 50 {
		t.Errorf("percent = %v, want 50", p)
	}
	if _, err := parseCPU([]byte("intr 1 2 3")); err == nil {
		t.Error("parseCPU accepted a file without the cpu line")
	}
	total, avail := meminfo([]byte("MemTotal:       1000 kB\nMemFree:  10 kB\nMemAvailable:    250 kB\n"))
	if total != 1000*1024 || avail != 250*1024 {
		t.Errorf("meminfo = %d, %d", total, avail)
	}
}
