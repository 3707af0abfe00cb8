//go:build e2e

package gohttp

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var sandboxIDRe = regexp.MustCompile(`^[a-z0-9]+$`)

// semverAtLeast reports whether v (e.g. "0.6.13") is >= min.
func semverAtLeast(v string, min [3]int) bool {
	parts := strings.SplitN(strings.SplitN(v, "-", 2)[0], ".", 3)
	if len(parts) != 3 {
		return false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return false
		}
		if n != min[i] {
			return n > min[i]
		}
	}
	return true
}

func TestCreateV1PythonBody(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 120, map[string]string{"suite": "gohttp-create"})
	requireKeys(t, "Sandbox", s.raw, "templateID", "sandboxID", "clientID", "envdVersion", "envdAccessToken")
	if !sandboxIDRe.MatchString(s.SandboxID) {
		t.Errorf("sandboxID %q does not match %s", s.SandboxID, sandboxIDRe)
	}
	if !semverAtLeast(s.EnvdVersion, [3]int{0, 6, 4}) {
		t.Errorf("envdVersion %q is not a semver >= 0.6.4", s.EnvdVersion)
	}
	if s.EnvdAccessToken == "" {
		t.Error("secure:true create returned no envdAccessToken")
	}
	if d, ok := s.raw["domain"]; ok && d != nil && d != "" {
		t.Errorf("domain %v returned: the SDK would route sandbox traffic there", d)
	}

	// The sandbox works.
	res := e.run(t, s, "", "echo hello-$((6*7))", 60*time.Second)
	if !res.endSeen || res.exitCode != 0 || res.stdout != "hello-42\n" || !res.streamOK {
		t.Fatalf("echo: %+v", res)
	}

	// GET /sandboxes/{id} (SandboxDetail).
	r := e.api(t, http.MethodGet, "/sandboxes/"+s.SandboxID, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /sandboxes/id: %d %s", r.status, r.body)
	}
	var detail map[string]any
	r.json(t, &detail)
	requireKeys(t, "SandboxDetail", detail, "templateID", "sandboxID", "clientID", "startedAt", "endAt",
		"cpuCount", "memoryMB", "diskSizeMB", "state", "envdVersion")
	if detail["state"] != "running" {
		t.Errorf("state %v, want running", detail["state"])
	}
}

func TestConnectV1(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 60, nil)
	r := e.api(t, http.MethodPost, "/sandboxes/"+s.SandboxID+"/connect", map[string]any{"timeout": 120})
	if r.status != http.StatusOK && r.status != http.StatusCreated {
		t.Fatalf("connect: status %d body %s", r.status, r.body)
	}
	var m map[string]any
	r.json(t, &m)
	requireKeys(t, "Sandbox", m, "templateID", "sandboxID", "clientID", "envdVersion")
	if m["sandboxID"] != s.SandboxID {
		t.Errorf("connect returned sandboxID %v, want %s", m["sandboxID"], s.SandboxID)
	}
	// Connect extended the timeout to ~120 s from now.
	r = e.api(t, http.MethodGet, "/sandboxes/"+s.SandboxID, nil)
	var d struct {
		EndAt time.Time `json:"endAt"`
	}
	r.json(t, &d)
	if left := time.Until(d.EndAt); left < 90*time.Second || left > 150*time.Second {
		t.Errorf("after connect{timeout:120} endAt is %v away, want ~120s", left)
	}

	r = e.api(t, http.MethodPost, "/sandboxes/nosuchsandbox0000000/connect", map[string]any{"timeout": 10})
	errorBody(t, r, http.StatusNotFound)
}

// pyQuote mimics Python's urllib.parse.quote (safe="/").
func pyQuote(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '-', c == '_', c == '.', c == '~', c == '/':
			b.WriteByte(c)
		default:
			b.WriteString("%" + strings.ToUpper(strconv.FormatUint(uint64(c)|0x100, 16)[1:]))
		}
	}
	return b.String()
}

// pythonMetadataQuery builds the `metadata` query value the Python SDK sends:
// urlencode({quote(k): quote(v)}).
func pythonMetadataQuery(md map[string]string) string {
	var pairs []string
	for k, v := range md {
		pairs = append(pairs, url.QueryEscape(pyQuote(k))+"="+url.QueryEscape(pyQuote(v)))
	}
	return strings.Join(pairs, "&")
}

func TestListV2PythonEncoding(t *testing.T) {
	e := loadEnv(t)
	tag := "x y/&=é " + uniqueTag(t)
	s := e.createV1(t, 120, map[string]string{"e2e-list": tag, "other": "1"})

	list := func(md map[string]string) []map[string]any {
		t.Helper()
		q := url.Values{}
		q.Set("state", "running,paused")
		q.Set("metadata", pythonMetadataQuery(md))
		r := e.api(t, http.MethodGet, "/v2/sandboxes?"+q.Encode(), nil)
		if r.status != http.StatusOK {
			t.Fatalf("list: status %d body %s", r.status, r.body)
		}
		var items []map[string]any
		r.json(t, &items)
		return items
	}

	items := list(map[string]string{"e2e-list": tag})
	if len(items) != 1 {
		t.Fatalf("list by metadata returned %d sandboxes, want 1: %v", len(items), items)
	}
	it := items[0]
	requireKeys(t, "ListedSandbox", it, "templateID", "sandboxID", "clientID", "startedAt", "endAt",
		"cpuCount", "memoryMB", "diskSizeMB", "state", "envdVersion")
	if it["sandboxID"] != s.SandboxID {
		t.Errorf("listed %v, want %s", it["sandboxID"], s.SandboxID)
	}
	md, _ := it["metadata"].(map[string]any)
	if md["e2e-list"] != tag || md["other"] != "1" {
		t.Errorf("metadata round trip: got %v", md)
	}
	for _, k := range []string{"startedAt", "endAt"} {
		v, _ := it[k].(string)
		if _, err := time.Parse(time.RFC3339, v); err != nil {
			t.Errorf("%s %q is not RFC 3339: %v", k, v, err)
		}
	}
	for _, k := range []string{"cpuCount", "memoryMB", "diskSizeMB"} {
		if _, ok := it[k].(float64); !ok {
			t.Errorf("%s is not a number: %v", k, it[k])
		}
	}

	// AND semantics: a second, non-matching pair excludes it.
	if got := list(map[string]string{"e2e-list": tag, "other": "2"}); len(got) != 0 {
		t.Errorf("non-matching filter returned %d sandboxes", len(got))
	}
	// Repeated state params are accepted too.
	q := url.Values{}
	q.Add("state", "running")
	q.Add("state", "paused")
	q.Set("metadata", pythonMetadataQuery(map[string]string{"e2e-list": tag}))
	r := e.api(t, http.MethodGet, "/v2/sandboxes?"+q.Encode(), nil)
	var again []map[string]any
	r.json(t, &again)
	if r.status != http.StatusOK || len(again) != 1 {
		t.Errorf("repeated state params: status %d, %d items", r.status, len(again))
	}
}

func TestErrorShapes(t *testing.T) {
	e := loadEnv(t)
	t.Run("unknown sandbox 404", func(t *testing.T) {
		errorBody(t, e.api(t, http.MethodGet, "/sandboxes/nosuchsandbox0000000", nil), http.StatusNotFound)
		errorBody(t, e.api(t, http.MethodDelete, "/sandboxes/nosuchsandbox0000000", nil), http.StatusNotFound)
		errorBody(t, e.api(t, http.MethodPost, "/sandboxes/nosuchsandbox0000000/timeout",
			map[string]any{"timeout": 10}), http.StatusNotFound)
	})
	t.Run("malformed JSON 400", func(t *testing.T) {
		errorBody(t, e.api(t, http.MethodPost, "/v2/sandboxes", `{"templateID": "base",`), http.StatusBadRequest)
		errorBody(t, e.api(t, http.MethodPost, "/sandboxes", `not json`), http.StatusBadRequest)
	})
	t.Run("NUL in metadata or envVars 400", func(t *testing.T) {
		errorBody(t, e.api(t, http.MethodPost, "/v2/sandboxes", `{"templateID":"base","metadata":{"k":"a\u0000b"}}`), http.StatusBadRequest)
		errorBody(t, e.api(t, http.MethodPost, "/v2/sandboxes", `{"templateID":"base","envVars":{"A":"\u0000"}}`), http.StatusBadRequest)
	})
	t.Run("missing API key 401", func(t *testing.T) {
		errorBody(t, e.apiWithKey(t, "", http.MethodGet, "/v2/sandboxes", nil), http.StatusUnauthorized)
		errorBody(t, e.apiWithKey(t, "", http.MethodPost, "/sandboxes",
			map[string]any{"templateID": "base"}), http.StatusUnauthorized)
	})
	t.Run("wrong API key 401", func(t *testing.T) {
		errorBody(t, e.apiWithKey(t, "e2b_0000000000000000000000000000000000000000",
			http.MethodGet, "/v2/sandboxes", nil), http.StatusUnauthorized)
	})
	t.Run("unknown template", func(t *testing.T) {
		r := e.api(t, http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": "no-such-template-e2e"})
		if r.status < 400 || r.status >= 500 {
			t.Fatalf("unknown template: status %d (want 4xx) body %s", r.status, r.body)
		}
		errorBody(t, r, r.status)
	})
	t.Run("unknown sandbox via proxy 502", func(t *testing.T) {
		s := sandboxInfo{SandboxID: "nosuchsandbox0000000"}
		st, body := e.connectUnary(t, s, "/process.Process/List", "", map[string]any{})
		if st != http.StatusBadGateway {
			t.Fatalf("proxy to unknown sandbox: status %d body %s, want 502", st, body)
		}
	})
}
