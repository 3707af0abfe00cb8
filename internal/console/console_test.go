package console

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

const testKey = "e2b_0123456789abcdef0123456789abcdef01234567"

// next stands for the REST API.
var next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Next", "api")
	w.WriteHeader(http.StatusTeapot)
})

func builtFS() fstest.MapFS {
	return fstest.MapFS{
		"index.html":         {Data: []byte("<!doctype html><title>console</title>")},
		"assets/index-1.js":  {Data: []byte("console.log(1)")},
		"assets/index-1.css": {Data: []byte("body{}")},
	}
}

func do(t *testing.T, h http.Handler, method, target string, hdr map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStaticFiles(t *testing.T) {
	t.Parallel()
	h := newWithFS(Options{APIKey: testKey, Next: next}, builtFS())

	res := do(t, h, "GET", "/console/", nil)
	if res.StatusCode != 200 || !strings.Contains(body(t, res), "<title>console</title>") {
		t.Fatalf("GET /console/: status %d, want the index", res.StatusCode)
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP = %q, want default-src 'self' and frame-ancestors 'none'", csp)
	}

	res = do(t, h, "GET", "/console/assets/index-1.js", nil)
	if res.StatusCode != 200 || body(t, res) != "console.log(1)" {
		t.Fatalf("asset: status %d", res.StatusCode)
	}
	if cc := res.Header.Get("Cache-Control"); !strings.Contains(cc, "immutable") {
		t.Errorf("asset Cache-Control = %q, want immutable", cc)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("asset Content-Type = %q", ct)
	}

	// Client-side routes get the index; missing files with an extension a 404 in E2B's shape.
	if res := do(t, h, "GET", "/console/sandboxes/abc", nil); res.StatusCode != 200 || !strings.Contains(body(t, res), "console") {
		t.Errorf("client route: status %d, want the index", res.StatusCode)
	}
	res = do(t, h, "GET", "/console/nope.js", nil)
	var e airlock.Error
	if err := json.NewDecoder(res.Body).Decode(&e); err != nil || res.StatusCode != 404 || e.Code != 404 || e.Message == "" {
		t.Errorf("missing file: status %d body %+v err %v, want a 404 {code,message}", res.StatusCode, e, err)
	}
	// Traversal stays inside the embedded files.
	if res := do(t, h, "GET", "/console/../../etc/passwd", nil); res.StatusCode == 200 && strings.Contains(body(t, res), "root:") {
		t.Error("path traversal read a host file")
	}
	if res := do(t, h, "POST", "/console/", nil); res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /console/: status %d, want 405", res.StatusCode)
	}
}

func TestPlaceholderWithoutBuild(t *testing.T) {
	t.Parallel()
	h := newWithFS(Options{APIKey: testKey, Next: next}, fstest.MapFS{".gitignore": {Data: []byte("*")}})
	res := do(t, h, "GET", "/console/", nil)
	if b := body(t, res); res.StatusCode != 200 || !strings.Contains(b, "scripts/setup.sh") {
		t.Fatalf("status %d body %q: want the placeholder naming scripts/setup.sh", res.StatusCode, b)
	}
}

func TestEmbeddedBuildServes(t *testing.T) {
	t.Parallel()
	// Whether or not the front-end was built, the embedded files serve a page.
	res := do(t, New(Options{APIKey: testKey, Next: next}), "GET", "/console/", nil)
	if b := body(t, res); res.StatusCode != 200 || !strings.Contains(b, "<html") {
		t.Fatalf("status %d body %.200q", res.StatusCode, b)
	}
}

func TestRoutingLeavesTheAPIAlone(t *testing.T) {
	t.Parallel()
	h := newWithFS(Options{APIKey: testKey, Next: next}, builtFS())
	for _, tc := range []struct {
		method, path string
		hdr          map[string]string
		wantStatus   int
		wantLocation string
	}{
		{"GET", "/", map[string]string{"Accept": "text/html,application/xhtml+xml"}, http.StatusFound, "/console/"},
		{"GET", "/console", nil, http.StatusFound, "/console/"},
		{"GET", "/", nil, http.StatusTeapot, ""},                                                                   // API clients
		{"GET", "/", map[string]string{"Accept": "text/html", "X-API-Key": testKey}, http.StatusTeapot, ""},        // API clients with a key
		{"POST", "/", map[string]string{"Accept": "text/html"}, http.StatusTeapot, ""},                             // only GET redirects
		{"GET", "/sandboxes", map[string]string{"Accept": "text/html"}, http.StatusTeapot, ""},                     // API paths
		{"GET", "/consolex", nil, http.StatusTeapot, ""},                                                           // not the console
		{"GET", "/console/api/nothing", map[string]string{"X-API-Key": testKey}, http.StatusNotFound, ""},          // console API 404
		{"DELETE", "/console/api/overview", map[string]string{"X-API-Key": testKey}, http.StatusNotFound, ""},      // wrong method
		{"GET", "/health", map[string]string{"Accept": "text/html"}, http.StatusTeapot, ""},                        // health stays the API's
		{"GET", "/sandboxes/x/metrics", map[string]string{"Accept": "text/html"}, http.StatusTeapot, ""},           // metrics too
		{"OPTIONS", "/sandboxes", map[string]string{"Origin": "http://example.com"}, http.StatusTeapot, ""},        // CORS preflight to the API
		{"GET", "/console/api/overview", map[string]string{"X-API-Key": "e2b_wrong"}, http.StatusUnauthorized, ""}, // bad key
	} {
		res := do(t, h, tc.method, tc.path, tc.hdr)
		if res.StatusCode != tc.wantStatus || res.Header.Get("Location") != tc.wantLocation {
			t.Errorf("%s %s %v: status %d location %q, want %d %q", tc.method, tc.path, tc.hdr, res.StatusCode, res.Header.Get("Location"), tc.wantStatus, tc.wantLocation)
		}
	}
}

func TestOverviewNeedsTheKey(t *testing.T) {
	t.Parallel()
	ov := metrics.NewOverview(t.TempDir(), time.Hour, nil)
	now := time.Now()
	ov.ObserveCreate(now, 800*time.Millisecond, true)
	ov.ObserveCreate(now, 1200*time.Millisecond, true)
	ov.ObserveCreate(now, 50*time.Millisecond, false)
	ov.SampleHost(now)
	h := newWithFS(Options{APIKey: testKey, Next: next, Overview: ov,
		Counts: func() map[string]int { return map[string]int{"running": 3, "paused": 1} }}, builtFS())

	for _, hdr := range []map[string]string{nil, {"X-API-Key": "e2b_wrong"}, {"Authorization": "Bearer e2b_wrong"}} {
		res := do(t, h, "GET", "/console/api/overview", hdr)
		var e airlock.Error
		if err := json.NewDecoder(res.Body).Decode(&e); err != nil || res.StatusCode != 401 || e.Code != 401 {
			t.Errorf("headers %v: status %d body %+v, want 401 {code,message}", hdr, res.StatusCode, e)
		}
	}

	res := do(t, h, "GET", "/console/api/overview", map[string]string{"X-API-Key": testKey})
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	var got overviewJSON
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.States["running"] != 3 || got.States["paused"] != 1 {
		t.Errorf("states = %v", got.States)
	}
	if n := len(got.CreatesPerMinute); n != 60 {
		t.Fatalf("%d minutes, want 60", n)
	}
	last := got.CreatesPerMinute[59]
	if last.Creates != 3 || last.Failed != 1 {
		t.Errorf("this minute = %+v, want 3 creates, 1 failed", last)
	}
	if l := got.CreateLatency; l.Count != 2 || l.P50 != 0.8 || l.P99 != 1.2 {
		t.Errorf("latency = %+v, want count 2, p50 0.8, p99 1.2", l)
	}
	if len(got.Host) != 1 || got.Host[0].MemTotal == 0 || got.Host[0].DiskTotal == 0 {
		t.Errorf("host = %+v, want one sample with memory and disk totals", got.Host)
	}
}
