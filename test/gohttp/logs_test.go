//go:build e2e

package gohttp

import (
	"net/http"
	"strings"
	"testing"
)

// TestSandboxLogs: GET /sandboxes/{id}/logs and /v2/... report a real
// sandbox's lifecycle, in order, and keep it after the kill.
func TestSandboxLogs(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 300, nil)
	id := s.SandboxID
	steps := []struct {
		method, path string
		body         any
		status       int
	}{
		{http.MethodPost, "/sandboxes/" + id + "/timeout", map[string]any{"timeout": 200}, http.StatusNoContent},
		{http.MethodPut, "/sandboxes/" + id + "/network", map[string]any{"denyOut": []string{"192.0.2.0/24"}}, http.StatusNoContent},
		{http.MethodPost, "/sandboxes/" + id + "/pause", nil, http.StatusNoContent},
		{http.MethodPost, "/sandboxes/" + id + "/resume", map[string]any{"timeout": 200}, http.StatusCreated},
		{http.MethodDelete, "/sandboxes/" + id, nil, http.StatusNoContent},
	}
	for _, st := range steps {
		if r := e.api(t, st.method, st.path, st.body); r.status != st.status {
			t.Fatalf("%s %s: %d %s, want %d", st.method, st.path, r.status, r.body, st.status)
		}
	}

	var v1 struct {
		Logs []struct {
			Line string `json:"line"`
		} `json:"logs"`
		LogEntries []struct {
			Level   string            `json:"level"`
			Message string            `json:"message"`
			Fields  map[string]string `json:"fields"`
		} `json:"logEntries"`
	}
	r := e.api(t, http.MethodGet, "/sandboxes/"+id+"/logs", nil)
	if r.status != http.StatusOK {
		t.Fatalf("logs: %d %s", r.status, r.body)
	}
	r.json(t, &v1)
	var msgs []string
	for _, le := range v1.LogEntries {
		msgs = append(msgs, le.Message)
	}
	got := strings.Join(msgs, "|")
	pos := 0
	for _, want := range []string{"sandbox created", "sandbox timeout changed", "sandbox network policy changed",
		"sandbox paused", "sandbox resumed", "sandbox killed"} {
		i := strings.Index(got[pos:], want)
		if i < 0 {
			t.Fatalf("logs lack %q after position %d: %s", want, pos, got)
		}
		pos += i + len(want)
	}
	if len(v1.Logs) != len(v1.LogEntries) || v1.LogEntries[0].Fields["template"] != "base" {
		t.Errorf("v1 body %s", r.body)
	}

	r = e.api(t, http.MethodGet, "/v2/sandboxes/"+id+"/logs?direction=backward&limit=1", nil)
	var v2 struct {
		Logs []struct {
			Message string `json:"message"`
		} `json:"logs"`
	}
	r.json(t, &v2)
	if r.status != http.StatusOK || len(v2.Logs) != 1 || v2.Logs[0].Message != "sandbox killed" {
		t.Errorf("v2 newest: %d %s", r.status, r.body)
	}
}
