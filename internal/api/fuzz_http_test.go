package api_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// fuzzRoutes are the endpoints FuzzAPIRequest aims at; the fuzzer picks one
// by index and supplies the query and body.
var fuzzRoutes = []struct{ method, path string }{
	{http.MethodPost, "/sandboxes"},
	{http.MethodPost, "/v2/sandboxes"},
	{http.MethodGet, "/v2/sandboxes"},
	{http.MethodGet, "/sandboxes"},
	{http.MethodPost, "/sandboxes/iabc/timeout"},
	{http.MethodPost, "/sandboxes/iabc/refreshes"},
	{http.MethodPost, "/sandboxes/iabc/connect"},
	{http.MethodGet, "/sandboxes/iabc"},
	{http.MethodDelete, "/sandboxes/iabc"},
	{http.MethodGet, "/templates"},
}

// FuzzAPIRequest sends arbitrary queries and bodies to the control plane (on
// fake sandboxes): it must never answer 5xx, and every error is the E2B
// shape {code,message} with code equal to the status and valid UTF-8.
func FuzzAPIRequest(f *testing.F) {
	f.Add(uint8(0), "", `{"templateID":"base","timeout":30,"metadata":{"a":"b"},"envVars":{"X":"1"},"secure":true}`)
	f.Add(uint8(1), "", `{"templateID":"base","timeout":-1}`)
	f.Add(uint8(1), "", `{"templateID":"nope","autoPause":true}`)
	f.Add(uint8(2), "state=running&metadata=a%3Db&limit=2&nextToken=xyz", "")
	f.Add(uint8(2), "state=bogus&limit=-1", "")
	f.Add(uint8(4), "", `{"timeout":99999999999}`)
	f.Add(uint8(6), "", `{"timeout":"x"}`)
	f.Add(uint8(0), "", "{\"metadata\":{\"k\":\"\xff\"}}")
	f.Add(uint8(1), "", strings.Repeat("[", 10001))
	env := sandboxtest.NewEnv(f, nil)
	h := api.New(env.Manager, &fakeTemplates{}, api.Options{APIKey: testKey, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	f.Fuzz(func(t *testing.T, route uint8, query, body string) {
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		req := httptest.NewRequest(rt.method, "/", strings.NewReader(body))
		req.URL.Path = rt.path
		req.URL.RawQuery = query
		req.Header.Set("X-API-Key", testKey)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		res := rec.Result()
		out, _ := io.ReadAll(res.Body)
		if res.StatusCode >= 500 && res.StatusCode != http.StatusNotImplemented { // 501: a documented "not supported yet"
			t.Fatalf("%s %s?%q body %q: status %d %s", rt.method, rt.path, query, body, res.StatusCode, out)
		}
		if res.StatusCode >= 400 {
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(out, &e); err != nil || e.Code != res.StatusCode || e.Message == "" {
				t.Fatalf("%s %s: error body %q for status %d", rt.method, rt.path, out, res.StatusCode)
			}
		}
		if !utf8.Valid(out) {
			t.Fatalf("%s %s: response is not valid UTF-8: %q", rt.method, rt.path, out)
		}
		// Created sandboxes are killed again so the fake slot pool never fills.
		if res.StatusCode == http.StatusCreated {
			var sb struct {
				SandboxID string `json:"sandboxID"`
			}
			if json.Unmarshal(out, &sb) == nil && sb.SandboxID != "" {
				del := httptest.NewRequest(http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil)
				del.Header.Set("X-API-Key", testKey)
				h.ServeHTTP(httptest.NewRecorder(), del)
			}
		}
	})
}
