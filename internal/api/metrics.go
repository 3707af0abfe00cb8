package api

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/middleware"
)

// MetricsStore answers sandbox metric queries (internal/metrics.Collector).
type MetricsStore interface {
	// Query returns id's samples with start <= Time <= end, oldest first.
	Query(id string, start, end time.Time) []metrics.Sample
}

// maxMetricsIDs caps sandbox_ids of GET /sandboxes/metrics.
const maxMetricsIDs = 100

// sandboxMetricJSON is E2B's SandboxMetric.
type sandboxMetricJSON struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       uint64    `json:"memUsed"`
	MemTotal      uint64    `json:"memTotal"`
	MemCache      uint64    `json:"memCache"`
	DiskUsed      uint64    `json:"diskUsed"`
	DiskTotal     uint64    `json:"diskTotal"`
}

func toMetricJSON(s metrics.Sample) sandboxMetricJSON {
	return sandboxMetricJSON{
		Timestamp:     s.Time.UTC(),
		TimestampUnix: s.Time.Unix(),
		CPUCount:      s.CPUCount,
		CPUUsedPct:    float64(int(s.CPUUsedPct*100)) / 100,
		MemUsed:       s.MemUsed,
		MemTotal:      s.MemTotal,
		MemCache:      s.MemCache,
		DiskUsed:      s.DiskUsed,
		DiskTotal:     s.DiskTotal,
	}
}

// unixParam parses an optional unix-seconds query parameter.
func unixParam(r *http.Request, name string) (t time.Time, set bool, err error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, false, fmt.Errorf("%s must be a unix timestamp in seconds, got %q", name, v)
	}
	return time.Unix(n, 0), true, nil
}

// sandboxMetrics serves GET /sandboxes/{id}/metrics?start=&end= (unix
// seconds; default: the sandbox's start until now).
func (a *api) sandboxMetrics(w http.ResponseWriter, r *http.Request) {
	e, ok := a.live(w, r)
	if !ok {
		return
	}
	sb := e.View()
	start, startSet, err := unixParam(r, "start")
	if err != nil {
		middleware.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	end, endSet, err := unixParam(r, "end")
	if err != nil {
		middleware.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !startSet {
		start = sb.StartedAt.Add(-time.Second)
	}
	if !endSet {
		end = time.Now()
	} else {
		end = end.Add(time.Second - time.Nanosecond) // the whole end second
	}
	if end.Before(start) {
		middleware.WriteError(w, http.StatusBadRequest, "start must not be after end")
		return
	}
	out := []sandboxMetricJSON{}
	if a.opts.Metrics != nil {
		for _, s := range a.opts.Metrics.Query(sb.ID, start, end) {
			out = append(out, toMetricJSON(s))
		}
	}
	middleware.WriteJSON(w, http.StatusOK, out)
}

// sandboxesMetrics serves GET /sandboxes/metrics?sandbox_ids=a,b: the newest
// sample of each listed live sandbox; unknown ids are left out.
func (a *api) sandboxesMetrics(w http.ResponseWriter, r *http.Request) {
	var ids []string
	for _, v := range r.URL.Query()["sandbox_ids"] {
		for id := range strings.SplitSeq(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		middleware.WriteError(w, http.StatusBadRequest, "sandbox_ids is required (comma-separated sandbox ids)")
		return
	}
	if len(ids) > maxMetricsIDs {
		middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("at most %d sandbox_ids per request", maxMetricsIDs))
		return
	}
	out := map[string]sandboxMetricJSON{}
	for _, id := range ids {
		if i := strings.IndexByte(id, '-'); i >= 0 {
			id = id[:i]
		}
		e, err := a.m.Lookup(id)
		if err != nil || a.opts.Metrics == nil {
			continue
		}
		sb := e.View()
		samples := a.opts.Metrics.Query(sb.ID, sb.StartedAt.Add(-time.Second), time.Now())
		if len(samples) > 0 {
			out[sb.ID] = toMetricJSON(samples[len(samples)-1])
		}
	}
	middleware.WriteJSON(w, http.StatusOK, map[string]any{"sandboxes": out})
}

// prometheus serves the daemon's Prometheus metrics (behind the API key).
func (a *api) prometheus(w http.ResponseWriter, r *http.Request) {
	if a.opts.Prometheus == nil {
		middleware.WriteError(w, http.StatusNotFound, "Prometheus metrics are not enabled")
		return
	}
	a.opts.Prometheus.ServeHTTP(w, r)
}
