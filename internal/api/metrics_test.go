package api_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/metrics"
)

// fakeMetrics returns one sample per second of the last minute for every id.
type fakeMetrics struct {
	mu      sync.Mutex
	queries []string
}

func (f *fakeMetrics) Query(id string, start, end time.Time) []metrics.Sample {
	f.mu.Lock()
	f.queries = append(f.queries, id)
	f.mu.Unlock()
	out := []metrics.Sample{}
	now := time.Now().Truncate(time.Second)
	for i := 60; i >= 0; i-- {
		ts := now.Add(-time.Duration(i) * time.Second)
		if ts.Before(start) || ts.After(end) {
			continue
		}
		out = append(out, metrics.Sample{Time: ts, CPUCount: 2, CPUUsedPct: 12.3456, MemUsed: uint64(i), MemTotal: 512 << 20, DiskTotal: 1 << 30})
	}
	return out
}

func TestSandboxMetrics(t *testing.T) {
	t.Parallel()
	fm := &fakeMetrics{}
	h := newHarness(t, api.Options{Metrics: fm})
	id := createID(t, h, `{"templateID":"base"}`)

	st, _, body := h.do(t, "GET", "/sandboxes/"+id+"/metrics", "")
	if st != 200 {
		t.Fatalf("metrics = %d %s", st, body)
	}
	all := decode[[]map[string]any](t, body)
	if len(all) == 0 {
		t.Fatalf("no samples since the sandbox started: %s", body)
	}
	m := all[len(all)-1]
	for _, k := range []string{"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal", "memCache", "diskUsed", "diskTotal"} {
		if _, ok := m[k]; !ok {
			t.Errorf("sample lacks %q: %v", k, m)
		}
	}
	if m["cpuUsedPct"].(float64) != 12.34 || m["memTotal"].(float64) != 512<<20 {
		t.Errorf("sample %v: want cpuUsedPct 12.34, memTotal 512 MiB", m)
	}
	ts, err := time.Parse(time.RFC3339Nano, m["timestamp"].(string))
	if err != nil || ts.Unix() != int64(m["timestampUnix"].(float64)) {
		t.Errorf("timestamp %v / timestampUnix %v disagree (%v)", m["timestamp"], m["timestampUnix"], err)
	}

	now := time.Now().Unix()
	st, _, body = h.do(t, "GET", fmt.Sprintf("/sandboxes/%s/metrics?start=%d&end=%d", id, now-7200, now-3600), "")
	if st != 200 || strings.TrimSpace(string(body)) != "[]" {
		t.Fatalf("window an hour ago = %d %s, want 200 []", st, body)
	}
	st, _, body = h.do(t, "GET", fmt.Sprintf("/sandboxes/%s/metrics?start=%d&end=%d", id, now-10, now-5), "")
	if got := decode[[]map[string]any](t, body); st != 200 || len(got) != 6 {
		t.Fatalf("window [now-10, now-5] = %d, %d samples, want 6 (both ends inclusive)", st, len(got))
	}

	st, _, body = h.do(t, "GET", "/sandboxes/"+id+"/metrics?start=yesterday", "")
	assertError(t, st, body, 400, "start must be a unix timestamp")
	st, _, body = h.do(t, "GET", fmt.Sprintf("/sandboxes/%s/metrics?start=%d&end=%d", id, now, now-60), "")
	assertError(t, st, body, 400, "start must not be after end")
	st, _, body = h.do(t, "GET", "/sandboxes/nosuchsandbox/metrics", "")
	assertError(t, st, body, 404, "nosuchsandbox")
}

func TestSandboxesMetricsBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{Metrics: &fakeMetrics{}})
	a := createID(t, h, `{}`)
	b := createID(t, h, `{}`)
	st, _, body := h.do(t, "GET", "/sandboxes/metrics?sandbox_ids="+a+","+b+"-6532622b,gone", "")
	if st != 200 {
		t.Fatalf("batch = %d %s", st, body)
	}
	got := decode[map[string]map[string]map[string]any](t, body)["sandboxes"]
	if len(got) != 2 || got[a] == nil || got[b] == nil {
		t.Fatalf("batch = %s, want entries for %s and %s only", body, a, b)
	}
	if got[a]["memUsed"].(float64) != 0 {
		t.Errorf("batch entry %v is not the newest sample", got[a])
	}
	st, _, body = h.do(t, "GET", "/sandboxes/metrics", "")
	assertError(t, st, body, 400, "sandbox_ids is required")
}

func TestPrometheusEndpointAuth(t *testing.T) {
	t.Parallel()
	prom := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "airlock_sandboxes_running 0\n") })
	h := newHarness(t, api.Options{Prometheus: prom})
	st, _, body := h.doKey(t, "GET", "/metrics", "", "")
	assertError(t, st, body, 401, "Invalid API key")
	req, _ := http.NewRequest("GET", h.srv.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(data), "airlock_sandboxes_running") {
		t.Fatalf("bearer scrape = %d %s", resp.StatusCode, data)
	}
	req.Header.Set("Authorization", "Bearer e2b_wrong")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("wrong bearer = %d, want 401", resp.StatusCode)
	}
}
