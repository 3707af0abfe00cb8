package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

const testKey = "e2b_0123456789abcdef0123456789abcdef01234567"

type fakeTemplates struct{}

func (f *fakeTemplates) List(ctx context.Context) ([]api.TemplateInfo, error) {
	return []api.TemplateInfo{{Name: "base", Hash: "h1", SizeBytes: 42, CreatedAt: time.Unix(1700000000, 0)}}, nil
}

func (f *fakeTemplates) Build(ctx context.Context, name string, force bool, progress func(airlock.Progress)) (*api.TemplateInfo, error) {
	if name == "broken" {
		progress(airlock.Progress{Phase: "bootstrap", Message: "starting"})
		return nil, fmt.Errorf("mmdebstrap failed")
	}
	progress(airlock.Progress{Phase: "bootstrap", Message: "fetching", Done: 1, Total: 2})
	progress(airlock.Progress{Phase: "bootstrap", Message: fmt.Sprintf("force=%v", force), Done: 2, Total: 2})
	return &api.TemplateInfo{Name: name, Hash: "h2", SizeBytes: 7, CreatedAt: time.Now()}, nil
}

type harness struct {
	env *sandboxtest.Env
	srv *httptest.Server
}

func newHarness(t *testing.T, opts api.Options) *harness {
	t.Helper()
	env := sandboxtest.NewEnv(t, nil)
	if opts.APIKey == "" {
		opts.APIKey = testKey
	}
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(api.New(env.Manager, &fakeTemplates{}, opts))
	t.Cleanup(srv.Close)
	return &harness{env: env, srv: srv}
}

// do sends a request with the API key and returns status, headers and body.
func (h *harness) do(t *testing.T, method, path, body string) (int, http.Header, []byte) {
	t.Helper()
	return h.doKey(t, method, path, body, testKey)
}

func (h *harness) doKey(t *testing.T, method, path, body, key string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("x-api-key", key) // lower case on purpose
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

func decode[T any](t *testing.T, data []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("decoding %s: %v", data, err)
	}
	return v
}

// assertError checks an E2B error body whose numeric code equals the status.
func assertError(t *testing.T, status int, data []byte, want int, msgPart string) {
	t.Helper()
	if status != want {
		t.Fatalf("status %d, want %d (body %s)", status, want, data)
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatalf("error body not JSON: %s", data)
	}
	code, ok := raw["code"].(float64)
	if !ok || int(code) != want {
		t.Fatalf("body code %v (%T), want number %d", raw["code"], raw["code"], want)
	}
	if msg, _ := raw["message"].(string); !strings.Contains(msg, msgPart) {
		t.Fatalf("message %q does not contain %q", msg, msgPart)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	for _, key := range []string{"", "e2b_wrong"} {
		st, _, body := h.doKey(t, "GET", "/v2/sandboxes", "", key)
		assertError(t, st, body, 401, "Invalid API key")
	}
	st, _, _ := h.doKey(t, "GET", "/health", "", "")
	if st != 200 {
		t.Fatalf("health without key = %d", st)
	}
	h.env.Manager.SetReady(false)
	st, _, body := h.doKey(t, "GET", "/health", "", "")
	assertError(t, st, body, 503, "not ready")
	st, _, _ = h.do(t, "GET", "/v2/sandboxes", "")
	if st != 200 {
		t.Fatalf("list with key = %d", st)
	}
}

func TestHealthNamesRuntimeAndPlatform(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{Runtime: "gvisor", RuntimeReason: "--runtime gvisor",
		Platform: "systrap", PlatformReason: "systrap probe ran in 180 ms"})
	st, _, body := h.doKey(t, "GET", "/health", "", "")
	if st != 200 {
		t.Fatalf("health = %d", st)
	}
	var got map[string]string
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"status": "ok", "runtime": "gvisor", "runtimeReason": "--runtime gvisor",
		"platform": "systrap", "platformReason": "systrap probe ran in 180 ms"}
	if !maps.Equal(got, want) {
		t.Fatalf("health = %v, want %v", got, want)
	}
	// A microVM daemon has no runsc platform.
	h = newHarness(t, api.Options{Runtime: "microvm", RuntimeReason: "KVM"})
	_, _, body = h.doKey(t, "GET", "/health", "", "")
	if strings.Contains(string(body), "platform") {
		t.Fatalf("microvm health names a platform: %s", body)
	}
}

func TestCORSPreflight(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	req, _ := http.NewRequest("OPTIONS", h.srv.URL+"/v2/sandboxes", nil)
	req.Header.Set("Origin", "http://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "x-api-key, content-type, lang_version")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "http://app.example" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "lang_version") ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "X-Next-Token") {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestCreateV2Defaults(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	st, _, body := h.do(t, "POST", "/v2/sandboxes", `{"templateID":"base","metadata":{"a":"b"},"envVars":{"X":"1"}}`)
	if st != 201 {
		t.Fatalf("create = %d %s", st, body)
	}
	raw := decode[map[string]any](t, body)
	for _, k := range []string{"templateID", "sandboxID", "clientID", "envdVersion", "envdAccessToken", "domain", "trafficAccessToken"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("missing key %q in %s", k, body)
		}
	}
	if raw["clientID"] != "6532622b" || raw["envdVersion"] != "0.6.13" || raw["domain"] != nil || raw["templateID"] != "base" {
		t.Fatalf("unexpected body %s", body)
	}
	id := raw["sandboxID"].(string)
	sb, err := viewOf(h.env.Manager, id)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(sb.EndAt); d < 290*time.Second || d > 300*time.Second {
		t.Fatalf("v2 default timeout gave %v", d)
	}
	if raw["envdAccessToken"] != sb.AccessToken || sb.AccessToken == "" {
		t.Fatal("v2 create is not secured")
	}
}

func TestCreateV1Defaults(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{Domain: "sbx.example"})
	st, _, body := h.do(t, "POST", "/sandboxes", `{"templateID":"base"}`)
	if st != 201 {
		t.Fatalf("create = %d %s", st, body)
	}
	raw := decode[map[string]any](t, body)
	if _, has := raw["envdAccessToken"]; has {
		t.Fatalf("v1 without secure returned a token: %s", body)
	}
	if raw["domain"] != "sbx.example" {
		t.Fatalf("domain = %v", raw["domain"])
	}
	sb, _ := viewOf(h.env.Manager, raw["sandboxID"].(string))
	if d := time.Until(sb.EndAt); d < 10*time.Second || d > 15*time.Second {
		t.Fatalf("v1 default timeout gave %v", d)
	}
	st, _, body = h.do(t, "POST", "/sandboxes", `{"templateID":"base","secure":true,"timeout":60,"metadata":{},"envVars":{},"allow_internet_access":false}`)
	if st != 201 {
		t.Fatalf("create = %d %s", st, body)
	}
	raw = decode[map[string]any](t, body)
	sb, _ = viewOf(h.env.Manager, raw["sandboxID"].(string))
	if raw["envdAccessToken"] == nil || raw["envdAccessToken"] != sb.AccessToken || sb.AllowInternet {
		t.Fatalf("secure v1: %s / %+v", body, sb)
	}
}

func TestCreateErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	st, _, body := h.do(t, "POST", "/v2/sandboxes", `{"templateID":`)
	assertError(t, st, body, 400, "invalid JSON")
	st, _, body = h.do(t, "POST", "/v2/sandboxes", `{"templateID":"nope"}`)
	assertError(t, st, body, 404, "template 'nope' not found")
	st, _, body = h.do(t, "POST", "/v2/sandboxes", `{"timeout":-1}`)
	assertError(t, st, body, 400, "timeout")
	st, _, body = h.do(t, "POST", "/v2/sandboxes", `{"autoPause":true}`)
	assertError(t, st, body, 501, `the "fake" runtime cannot pause`)
	st, _, body = h.do(t, "POST", "/v2/sandboxes", `{"network":{"denyOut":["exa$mple.com"]}}`)
	assertError(t, st, body, 400, "denyOut entry")
	st, _, body = h.do(t, "POST", "/sandboxes", `{"network":{"allowOut":["10.0.0.0/40"]}}`)
	assertError(t, st, body, 400, "allowOut entry")
	st, _, body = h.do(t, "POST", "/v2/sandboxes", `{"network":{"egressProxy":{"address":"p:1080"}}}`)
	assertError(t, st, body, 400, "Invalid egress proxy config: egress proxies are not enabled on this node")
	st, _, body = h.do(t, "POST", "/v2/sandboxes", `{"metadata":{"k":"a\u0000b"}}`)
	assertError(t, st, body, 400, "metadata: key \"k\": keys and values must not contain a NUL character")
	st, _, body = h.do(t, "POST", "/v2/sandboxes", `{"envVars":{"A\u0000":"b"}}`)
	assertError(t, st, body, 400, "envVars: key")
	big := `{"metadata":{"k":"` + strings.Repeat("x", 2<<20) + `"}}`
	st, _, body = h.do(t, "POST", "/v2/sandboxes", big)
	assertError(t, st, body, 413, "larger than")
	// Accepted but ignored: mcp (the SDK starts the gateway itself).
	st, _, body = h.do(t, "POST", "/v2/sandboxes", `{"mcp":{"x":{}},"network":{"allowPublicTraffic":true}}`)
	if st != 201 {
		t.Fatalf("create with mcp = %d %s", st, body)
	}
}

func createID(t *testing.T, h *harness, body string) string {
	t.Helper()
	st, _, data := h.do(t, "POST", "/v2/sandboxes", body)
	if st != 201 {
		t.Fatalf("create = %d %s", st, data)
	}
	return decode[map[string]any](t, data)["sandboxID"].(string)
}

func TestGetKillTimeoutConnect(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	id := createID(t, h, `{"metadata":{"m":"1"}}`)

	st, _, body := h.do(t, "GET", "/sandboxes/"+id+"-6532622b", "")
	if st != 200 {
		t.Fatalf("get = %d %s", st, body)
	}
	d := decode[map[string]any](t, body)
	for _, k := range []string{"templateID", "sandboxID", "clientID", "startedAt", "endAt", "cpuCount", "memoryMB", "diskSizeMB", "metadata", "state", "envdVersion", "envdAccessToken", "allowInternetAccess", "lifecycle"} {
		if _, ok := d[k]; !ok {
			t.Errorf("detail lacks %q", k)
		}
	}
	if d["state"] != "running" || d["sandboxID"] != id {
		t.Fatalf("detail %s", body)
	}

	st, _, body = h.do(t, "POST", "/sandboxes/"+id+"/timeout", `{"timeout":3600}`)
	if st != 204 {
		t.Fatalf("timeout = %d %s", st, body)
	}
	sb, _ := viewOf(h.env.Manager, id)
	if time.Until(sb.EndAt) < 3500*time.Second {
		t.Fatal("timeout not applied")
	}
	st, _, body = h.do(t, "POST", "/sandboxes/"+id+"/timeout", `{}`)
	assertError(t, st, body, 400, "timeout is required")

	st, _, body = h.do(t, "POST", "/sandboxes/"+id+"/connect", `{}`)
	assertError(t, st, body, 400, "timeout is required")
	st, _, body = h.do(t, "POST", "/sandboxes/"+id+"/connect", `{"timeout":10}`)
	if st != 200 || decode[map[string]any](t, body)["sandboxID"] != id {
		t.Fatalf("connect v1 = %d %s", st, body)
	}
	st, _, body = h.do(t, "POST", "/v2/sandboxes/"+id+"/connect", "")
	if st != 200 {
		t.Fatalf("connect v2 = %d %s", st, body)
	}
	st, _, body = h.do(t, "POST", "/v2/sandboxes/inotthere/connect", `{"timeout":10}`)
	assertError(t, st, body, 404, "inotthere")
	st, _, body = h.do(t, "POST", "/sandboxes/"+id+"/refreshes", `{"duration":10}`)
	if st != 204 {
		t.Fatalf("refresh = %d %s", st, body)
	}
	st, _, body = h.do(t, "POST", "/sandboxes/"+id+"/resume", `{}`)
	assertError(t, st, body, 409, "already running")
	st, _, body = h.do(t, "POST", "/sandboxes/"+id+"/pause", `{}`)
	assertError(t, st, body, 501, `the "fake" runtime cannot pause`)
	st, _, body = h.do(t, "POST", "/sandboxes/inotthere/pause", `{}`)
	assertError(t, st, body, 404, "inotthere")
	st, _, body = h.do(t, "POST", "/sandboxes/"+id+"/pause", `{"memory":false}`)
	assertError(t, st, body, 501, `the "fake" runtime cannot pause a sandbox without its memory`)

	st, _, _ = h.do(t, "DELETE", "/sandboxes/"+id, "")
	if st != 204 {
		t.Fatalf("delete = %d", st)
	}
	st, _, body = h.do(t, "DELETE", "/sandboxes/"+id, "")
	assertError(t, st, body, 404, id)
	st, _, body = h.do(t, "GET", "/sandboxes/"+id, "")
	assertError(t, st, body, 404, id)
	st, _, body = h.do(t, "GET", "/no/such/thing", "")
	assertError(t, st, body, 404, "no such endpoint")
}

func listIDs(t *testing.T, h *harness, query string) ([]string, string) {
	t.Helper()
	st, hdr, body := h.do(t, "GET", "/v2/sandboxes?"+query, "")
	if st != 200 {
		t.Fatalf("list %q = %d %s", query, st, body)
	}
	items := decode[[]map[string]any](t, body)
	var ids []string
	for _, it := range items {
		for _, k := range []string{"templateID", "sandboxID", "clientID", "startedAt", "endAt", "cpuCount", "memoryMB", "diskSizeMB", "state", "envdVersion"} {
			if _, ok := it[k]; !ok {
				t.Fatalf("listed sandbox lacks %q", k)
			}
		}
		ids = append(ids, it["sandboxID"].(string))
	}
	return ids, hdr.Get("X-Next-Token")
}

func TestListPaginationAndOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	var created []string
	for range 5 {
		created = append(created, createID(t, h, `{"metadata":{"suite":"page"}}`))
		time.Sleep(2 * time.Millisecond)
	}
	_, hdr, _ := h.do(t, "GET", "/v2/sandboxes", "")
	if hdr.Get("X-Total-Running") != "5" {
		t.Fatalf("X-Total-Running = %q", hdr.Get("X-Total-Running"))
	}
	for _, order := range []string{"asc", "desc", ""} {
		var got []string
		tok := ""
		pages := 0
		for {
			q := url.Values{"limit": {"2"}}
			if order != "" {
				q.Set("order", order)
			}
			if tok != "" {
				q.Set("nextToken", tok)
			}
			ids, next := listIDs(t, h, q.Encode())
			got = append(got, ids...)
			pages++
			if next == "" {
				break
			}
			if pages > 5 {
				t.Fatal("pagination does not terminate")
			}
			tok = next
		}
		if pages != 3 {
			t.Errorf("order %q: %d pages, want 3", order, pages)
		}
		want := created
		if order != "asc" {
			want = nil
			for i := len(created) - 1; i >= 0; i-- {
				want = append(want, created[i])
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("order %q: got %v, want %v", order, got, want)
		}
	}
	// Exactly limit items left: no token on the last page.
	if _, next := listIDs(t, h, "limit=5"); next != "" {
		t.Fatal("token present although no more pages")
	}
	for _, bad := range []string{"limit=0", "limit=101", "order=up", "nextToken=%21%21", "nextToken=Zm9v", "state=dead", "startedAfter=yesterday"} {
		st, _, body := h.do(t, "GET", "/v2/sandboxes?"+bad, "")
		assertError(t, st, body, 400, "")
	}
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	before := time.Now().UTC().Add(-time.Second)
	a := createID(t, h, `{"metadata":{"user id":"a&b=c/d+e ü","team":"x"}}`)
	b := createID(t, h, `{"metadata":{"team":"x"}}`)

	for name, q := range map[string]string{
		"comma":    "state=running,paused",
		"repeated": "state=running&state=paused",
		"running":  "state=running",
	} {
		if ids, _ := listIDs(t, h, q); len(ids) != 2 {
			t.Errorf("%s: %d sandboxes, want 2", name, len(ids))
		}
	}
	if ids, _ := listIDs(t, h, "state=paused"); len(ids) != 0 {
		t.Errorf("paused: %v", ids)
	}

	md := map[string]string{"user id": "a&b=c/d+e ü"}
	for name, inner := range map[string]string{"js": jsMetadata(md), "python": pyMetadata(md)} {
		q := url.Values{"metadata": {inner}}.Encode()
		ids, _ := listIDs(t, h, q)
		if len(ids) != 1 || ids[0] != a {
			t.Errorf("%s metadata filter %q: got %v, want [%s]", name, q, ids, a)
		}
	}
	if ids, _ := listIDs(t, h, url.Values{"metadata": {jsMetadata(map[string]string{"team": "x"})}}.Encode()); len(ids) != 2 {
		t.Errorf("team filter: %v", ids)
	}
	if ids, _ := listIDs(t, h, url.Values{"metadata": {jsMetadata(map[string]string{"team": "y"})}}.Encode()); len(ids) != 0 {
		t.Errorf("team=y filter: %v", ids)
	}
	if ids, _ := listIDs(t, h, "startedAfter="+url.QueryEscape(before.Format(time.RFC3339))); len(ids) != 2 {
		t.Errorf("startedAfter past: %v", ids)
	}
	if ids, _ := listIDs(t, h, "startedAfter="+url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))); len(ids) != 0 {
		t.Errorf("startedAfter future: %v", ids)
	}
	if ids, _ := listIDs(t, h, "template=base"); len(ids) != 2 {
		t.Errorf("template=base: %v", ids)
	}
	if ids, _ := listIDs(t, h, "template=other"); len(ids) != 0 {
		t.Errorf("template=other: %v", ids)
	}
	// v1 list.
	st, _, body := h.do(t, "GET", "/sandboxes?"+url.Values{"metadata": {pyMetadata(map[string]string{"team": "x"})}}.Encode(), "")
	if st != 200 || len(decode[[]map[string]any](t, body)) != 2 {
		t.Fatalf("v1 list = %d %s", st, body)
	}
	_ = b
}

func TestTemplatesListAndBuildStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	st, _, body := h.do(t, "GET", "/templates", "")
	if st != 200 {
		t.Fatalf("templates = %d", st)
	}
	ts := decode[[]map[string]any](t, body)
	if len(ts) != 1 || ts[0]["templateID"] != "base" || ts[0]["buildID"] != "h1" || ts[0]["sizeBytes"].(float64) != 42 {
		t.Fatalf("templates %s", body)
	}
	st, hdr, body := h.do(t, "POST", "/airlock/v1/templates/base/build?force=true", "")
	if st != 200 || hdr.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("build = %d %v", st, hdr)
	}
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		lines = append(lines, decode[map[string]any](t, sc.Bytes()))
	}
	if len(lines) != 3 || lines[0]["phase"] != "bootstrap" || lines[0]["total"].(float64) != 2 || lines[1]["message"] != "force=true" {
		t.Fatalf("progress lines %s", body)
	}
	final := lines[2]
	if final["done"] != true || final["template"].(map[string]any)["buildID"] != "h2" {
		t.Fatalf("final line %v", final)
	}
	_, _, body = h.do(t, "POST", "/airlock/v1/templates/broken/build", "")
	if !strings.Contains(string(body), `{"error":"mmdebstrap failed"}`) {
		t.Fatalf("broken build: %s", body)
	}
	st, _, body = h.do(t, "POST", "/airlock/v1/templates/..%2Fetc/build", "")
	if st != 400 && st != 404 {
		t.Fatalf("bad template name accepted: %d %s", st, body)
	}
}

// jsMetadata reproduces the JS SDK: encodeURIComponent on keys and values,
// then URLSearchParams.toString().
func jsMetadata(md map[string]string) string {
	var parts []string
	for k, v := range md {
		parts = append(parts, formEncode(uriComponent(k))+"="+formEncode(uriComponent(v)))
	}
	return strings.Join(parts, "&")
}

// pyMetadata reproduces the Python SDK: urllib.parse.urlencode over
// urllib.parse.quote'd keys and values.
func pyMetadata(md map[string]string) string {
	var parts []string
	for k, v := range md {
		parts = append(parts, pyQuotePlus(pyQuote(k))+"="+pyQuotePlus(pyQuote(v)))
	}
	return strings.Join(parts, "&")
}

func percentEncode(s string, keep func(byte) bool, spacePlus bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case spacePlus && c == ' ':
			b.WriteByte('+')
		case keep(c):
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

func uriComponent(s string) string {
	return percentEncode(s, func(c byte) bool { return alnum(c) || strings.IndexByte("-_.!~*'()", c) >= 0 }, false)
}

func formEncode(s string) string {
	return percentEncode(s, func(c byte) bool { return alnum(c) || strings.IndexByte("*-._", c) >= 0 }, true)
}

func pyQuote(s string) string {
	return percentEncode(s, func(c byte) bool { return alnum(c) || strings.IndexByte("_.-~/", c) >= 0 }, false)
}

func pyQuotePlus(s string) string {
	return percentEncode(s, func(c byte) bool { return alnum(c) || strings.IndexByte("_.-~", c) >= 0 }, true)
}

var _ = sandbox.EnvdVersion

// TestTemplateReads covers the template reads of E2B's SDKs and OpenAPI:
// the alias check (Template.exists), the v2 list, one template with its
// builds and its tags.
func TestTemplateReads(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	st, _, body := h.do(t, "GET", "/templates/aliases/base", "")
	if got := decode[map[string]any](t, body); st != 200 || got["templateID"] != "base" || got["public"] != false {
		t.Fatalf("alias base = %d %s", st, body)
	}
	st, _, body = h.do(t, "GET", "/templates/aliases/no-such-alias", "")
	if got := decode[map[string]any](t, body); st != 404 || got["code"].(float64) != 404 {
		t.Fatalf("unknown alias = %d %s", st, body)
	}
	_, _, v1 := h.do(t, "GET", "/templates", "")
	st, _, v2 := h.do(t, "GET", "/v2/templates", "")
	if st != 200 || string(v1) != string(v2) {
		t.Fatalf("v2 list = %d %s, v1 %s", st, v2, v1)
	}
	st, _, body = h.do(t, "GET", "/templates/base", "")
	tb := decode[map[string]any](t, body)
	builds, _ := tb["builds"].([]any)
	if st != 200 || tb["templateID"] != "base" || len(builds) != 1 {
		t.Fatalf("template = %d %s", st, body)
	}
	b := builds[0].(map[string]any)
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(b["buildID"].(string)) ||
		b["status"] != "ready" || b["cpuCount"].(float64) < 1 || b["memoryMB"].(float64) < 1 {
		t.Fatalf("build %v", b)
	}
	st, _, body = h.do(t, "GET", "/templates/base/tags", "")
	tags := decode[[]map[string]any](t, body)
	if st != 200 || len(tags) != 1 || tags[0]["tag"] != "default" || tags[0]["buildID"] != b["buildID"] {
		t.Fatalf("tags = %d %s", st, body)
	}
	for _, p := range []string{"/templates/no-such", "/templates/no-such/tags", "/templates/base/other"} {
		if st, _, body := h.do(t, "GET", p, ""); st != 404 {
			t.Errorf("%s = %d %s", p, st, body)
		}
	}
}

// viewOf is the state of live sandbox id (Manager.Lookup, Live.View).
func viewOf(m *sandbox.Manager, id string) (*sandbox.Sandbox, error) {
	e, err := m.Lookup(id)
	if err != nil {
		return nil, err
	}
	return e.View(), nil
}
