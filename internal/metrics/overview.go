package metrics

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Overview keeps the daemon-wide numbers the web console charts: creates
// per minute and create latency over the last hour, and host CPU, memory
// and disk use sampled every interval. Safe for concurrent use.
type Overview struct {
	interval time.Duration
	diskPath string
	log      *slog.Logger

	// mu guards the fields below.
	mu      sync.Mutex
	creates []createEvent // successful and failed creates of the last hour, oldest first
	host    []HostSample  // newest last, at most hostKeep
	prevCPU cpuTimes      // previous /proc/stat reading (zero before the first)
}

type createEvent struct {
	at      time.Time
	elapsed time.Duration
	ok      bool
}

// overviewWindow is how far back creates are kept.
const overviewWindow = time.Hour

// hostKeep is how many host samples are kept (30 min at 5 s).
const hostKeep = 360

// HostSample is one reading of the host's resources.
type HostSample struct {
	TimestampUnix int64   `json:"t"`
	CPUPct        float64 `json:"cpuPct"` // all CPUs, 0–100, over the last interval
	MemUsed       uint64  `json:"memUsed"`
	MemTotal      uint64  `json:"memTotal"`
	DiskUsed      uint64  `json:"diskUsed"` // file system of the data dir
	DiskTotal     uint64  `json:"diskTotal"`
}

// MinuteCount is the number of creates that started in one minute.
type MinuteCount struct {
	TimestampUnix int64 `json:"t"` // start of the minute
	Creates       int   `json:"creates"`
	Failed        int   `json:"failed"`
}

// OverviewSnapshot is what the console's overview endpoint returns.
type OverviewSnapshot struct {
	CreatesPerMinute []MinuteCount `json:"createsPerMinute"` // last 60 minutes, oldest first
	CreateLatency    Latency       `json:"createLatency"`    // successful creates of the last hour
	Host             []HostSample  `json:"host"`             // oldest first
}

// Latency summarises create durations in seconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
}

// NewOverview returns an Overview that measures the disk holding diskPath
// and samples the host every interval (≤0: 5 s) once Run is called.
func NewOverview(diskPath string, interval time.Duration, log *slog.Logger) *Overview {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	return &Overview{interval: interval, diskPath: diskPath, log: log}
}

// ObserveCreate records one create request that took elapsed.
func (o *Overview) ObserveCreate(now time.Time, elapsed time.Duration, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.creates = append(o.creates, createEvent{at: now, elapsed: elapsed, ok: ok})
	o.trimLocked(now)
}

func (o *Overview) trimLocked(now time.Time) {
	cut := 0
	for cut < len(o.creates) && now.Sub(o.creates[cut].at) > overviewWindow {
		cut++
	}
	o.creates = o.creates[cut:]
}

// Run samples the host until ctx is done.
func (o *Overview) Run(ctx context.Context) {
	t := time.NewTicker(o.interval)
	defer t.Stop()
	o.SampleHost(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			o.SampleHost(now)
		}
	}
}

// SampleHost takes one host reading (CPU use is relative to the previous
// reading, 0 for the first).
func (o *Overview) SampleHost(now time.Time) {
	s, cpu, err := readHost(o.diskPath)
	if err != nil {
		o.log.Debug("reading host stats", "err", err)
		return
	}
	s.TimestampUnix = now.Unix()
	o.mu.Lock()
	defer o.mu.Unlock()
	s.CPUPct = cpu.percentSince(o.prevCPU)
	o.prevCPU = cpu
	o.host = append(o.host, s)
	if len(o.host) > hostKeep {
		o.host = slices.Delete(o.host, 0, len(o.host)-hostKeep)
	}
}

// Snapshot returns the current numbers.
func (o *Overview) Snapshot(now time.Time) OverviewSnapshot {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.trimLocked(now)
	first := now.Truncate(time.Minute).Add(-59 * time.Minute)
	perMin := make([]MinuteCount, 60)
	for i := range perMin {
		perMin[i].TimestampUnix = first.Add(time.Duration(i) * time.Minute).Unix()
	}
	var lat []float64
	for _, c := range o.creates {
		i := int(c.at.Sub(first) / time.Minute)
		if i >= 0 && i < len(perMin) {
			perMin[i].Creates++
			if !c.ok {
				perMin[i].Failed++
			}
		}
		if c.ok {
			lat = append(lat, c.elapsed.Seconds())
		}
	}
	slices.Sort(lat)
	return OverviewSnapshot{
		CreatesPerMinute: perMin,
		CreateLatency:    Latency{Count: len(lat), P50: quantile(lat, 0.50), P99: quantile(lat, 0.99)},
		Host:             slices.Clone(o.host),
	}
}

// quantile returns the q-quantile of sorted (nearest rank), 0 when empty.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// cpuTimes are the aggregate jiffies of /proc/stat's "cpu" line.
type cpuTimes struct{ busy, total uint64 }

func (c cpuTimes) percentSince(prev cpuTimes) float64 {
	if prev.total == 0 || c.total <= prev.total || c.busy < prev.busy {
		return 0
	}
	return 100 * float64(c.busy-prev.busy) / float64(c.total-prev.total)
}
