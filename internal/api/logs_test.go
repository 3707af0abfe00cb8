package api_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/api"
)

type logsV1 struct {
	Logs []struct {
		Timestamp time.Time `json:"timestamp"`
		Line      string    `json:"line"`
	} `json:"logs"`
	LogEntries []logEntry `json:"logEntries"`
}

type logEntry struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

func messages(es []logEntry) string {
	var s []string
	for _, e := range es {
		s = append(s, e.Message)
	}
	return strings.Join(s, "|")
}

func TestSandboxLogs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	before := time.Now().Add(-time.Second)
	id := createID(t, h, `{}`)
	if st, _, body := h.do(t, "POST", "/sandboxes/"+id+"/timeout", `{"timeout":120}`); st != 204 {
		t.Fatalf("timeout = %d %s", st, body)
	}
	if st, _, body := h.do(t, "PUT", "/sandboxes/"+id+"/network", `{"denyOut":["192.0.2.0/24"]}`); st != 204 {
		t.Fatalf("network = %d %s", st, body)
	}

	st, _, body := h.do(t, "GET", "/sandboxes/"+id+"/logs", "")
	if st != 200 {
		t.Fatalf("logs = %d %s", st, body)
	}
	if !strings.Contains(string(body), `"dropped":0`) {
		t.Errorf("v1 body lacks the dropped count: %s", body)
	}
	var v1 logsV1
	if err := json.Unmarshal(body, &v1); err != nil {
		t.Fatal(err)
	}
	want := "sandbox created|sandbox timeout changed|sandbox network policy changed"
	if got := messages(v1.LogEntries); got != want {
		t.Fatalf("v1 events %q, want %q", got, want)
	}
	e := v1.LogEntries[0]
	if e.Level != "info" || e.Fields["template"] == "" || e.Fields["sandbox"] != "" || e.Timestamp.Before(before) {
		t.Errorf("created entry %+v", e)
	}
	if len(v1.Logs) != 3 || !strings.HasPrefix(v1.Logs[1].Line, "sandbox timeout changed ") || !strings.Contains(v1.Logs[1].Line, "timeout=2m0s") {
		t.Errorf("v1 lines %+v", v1.Logs)
	}
	// start and limit.
	_, _, body = h.do(t, "GET", "/sandboxes/"+id+"/logs?limit=1", "")
	if err := json.Unmarshal(body, &v1); err != nil || len(v1.LogEntries) != 1 {
		t.Errorf("limit=1: %s", body)
	}
	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	_, _, body = h.do(t, "GET", "/sandboxes/"+id+"/logs?start="+future, "")
	if err := json.Unmarshal(body, &v1); err != nil || len(v1.LogEntries) != 0 || v1.Logs == nil {
		t.Errorf("start in the future: %s", body)
	}

	// v2: direction, search, level.
	var v2 struct {
		Logs []logEntry `json:"logs"`
	}
	get2 := func(q string) string {
		t.Helper()
		st, _, body := h.do(t, "GET", "/v2/sandboxes/"+id+"/logs"+q, "")
		if st != 200 {
			t.Fatalf("v2%s = %d %s", q, st, body)
		}
		v2.Logs = nil
		if err := json.Unmarshal(body, &v2); err != nil {
			t.Fatal(err)
		}
		return messages(v2.Logs)
	}
	if got := get2(""); got != want {
		t.Errorf("v2 = %q", got)
	}
	if got := get2("?direction=backward&limit=2"); got != "sandbox network policy changed|sandbox timeout changed" {
		t.Errorf("v2 backward = %q", got)
	}
	if got := get2("?search=timeout"); got != "sandbox timeout changed" {
		t.Errorf("v2 search = %q", got)
	}
	if got := get2("?level=warn"); got != "" {
		t.Errorf("v2 level=warn = %q", got)
	}
	for _, q := range []string{"?direction=up", "?level=loud", "?limit=-1", "?cursor=x", "?limit=1001"} {
		st, _, body := h.do(t, "GET", "/v2/sandboxes/"+id+"/logs"+q, "")
		if st != 400 {
			t.Errorf("v2%s = %d %s, want 400", q, st, body)
		}
	}

	// A killed sandbox keeps its logs, with the reason.
	if st, _, body := h.do(t, "DELETE", "/sandboxes/"+id, ""); st != 204 {
		t.Fatalf("kill = %d %s", st, body)
	}
	if got := get2("?direction=backward&limit=1"); got != "sandbox killed" {
		t.Errorf("after kill: %q", got)
	}
	st, _, body = h.do(t, "GET", "/sandboxes/inotthere/logs", "")
	assertError(t, st, body, 404, "inotthere")
	st, _, body = h.do(t, "GET", "/v2/sandboxes/inotthere/logs", "")
	assertError(t, st, body, 404, "inotthere")
}
