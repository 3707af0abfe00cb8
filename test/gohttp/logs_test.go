//go:build e2e

package gohttp

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
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

// TestSandboxLogsHaveProcessEvents: a command run in the sandbox shows up in
// its logs as the agent's "process started" and "process ended" entries
// (same pid, source=agent), between the daemon's own events.
func TestSandboxLogsHaveProcessEvents(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 300, nil)
	defer e.kill(s.SandboxID)
	res := e.run(t, s, "user", "echo logged", time.Minute)
	if res.exitCode != 0 || res.pid == 0 {
		t.Fatalf("command: %+v", res)
	}
	pid := strconv.FormatUint(uint64(res.pid), 10)
	var v1 struct {
		LogEntries []struct {
			Message string            `json:"message"`
			Fields  map[string]string `json:"fields"`
		} `json:"logEntries"`
	}
	var started, ended bool
	ok := waitFor(10*time.Second, 200*time.Millisecond, func() bool {
		r := e.api(t, http.MethodGet, "/sandboxes/"+s.SandboxID+"/logs", nil)
		if r.status != http.StatusOK {
			t.Fatalf("logs: %d %s", r.status, r.body)
		}
		r.json(t, &v1)
		started, ended = false, false
		for i, le := range v1.LogEntries {
			if le.Fields["source"] != "agent" || le.Fields["pid"] != pid {
				continue
			}
			switch le.Message {
			case "process started":
				started = le.Fields["user"] == "user" && i > 0
			case "process ended":
				ended = started
			}
		}
		return started && ended
	})
	if !ok {
		t.Fatalf("logs lack the agent's start/end of pid %s (started=%v ended=%v): %+v", pid, started, ended, v1.LogEntries)
	}
	if v1.LogEntries[0].Message != "sandbox created" {
		t.Errorf("first entry %q, want the daemon's create (entries are merged by time)", v1.LogEntries[0].Message)
	}
}
