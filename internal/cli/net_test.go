package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
)

func TestNetLog(t *testing.T) {
	var gotQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != fakeKey {
			w.WriteHeader(401)
			return
		}
		switch r.URL.Path {
		case "/sandboxes/isb/network/log":
			gotQuery = r.URL.RawQuery
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"sandboxID":"isb","entries":[
				{"timestamp":"2026-01-02T03:04:05Z","kind":"dns","decision":"allowed","rule":"allowOut allowed.test","name":"allowed.test","qtype":"A","answers":["192.0.2.7"]},
				{"timestamp":"2026-01-02T03:04:06Z","kind":"connection","decision":"denied","rule":"denyOut 0.0.0.0/0","protocol":"tcp","ip":"192.0.2.8","port":80}]}`))
		case "/sandboxes/isd/network/log":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"sandboxID":"isd","dropped":1500,"entries":[
				{"timestamp":"2026-01-02T03:04:05Z","kind":"policy","decision":"denied","rule":"allowOut 10.0.0.1 does not open operator deny 10.0.0.0/8"},
				{"timestamp":"2026-01-02T03:04:06Z","kind":"connection","decision":"denied","rule":"host","protocol":"tcp","ip":"10.0.0.1","port":22}]}`))
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"code":404,"message":"sandbox \"inope\" not found"}`))
		}
	}))
	t.Cleanup(srv.Close)
	cli := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		root := NewRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(append([]string{"--url", srv.URL, "--api-key", fakeKey}, args...))
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}

	// What the daemon dropped is said after the table.
	out, err := cli("net", "log", "isd")
	if err != nil || !strings.Contains(out, "(1500 older entries dropped") || !strings.Contains(out, "10.0.0.1:22") {
		t.Errorf("dropped: %v\n%s", err, out)
	}
	// A policy note (an allowOut the operator's deny list keeps closed) has
	// no destination of its own: its rule says it all.
	if !regexp.MustCompile(`policy\s+denied\s+-\s+allowOut 10.0.0.1 does not open operator deny 10.0.0.0/8`).MatchString(out) {
		t.Errorf("policy entry not shown as such:\n%s", out)
	}

	out, err = cli("net", "log", "isb", "--limit", "5")
	if err != nil {
		t.Fatal(err)
	}
	if gotQuery != "limit=5" {
		t.Errorf("query %q, want limit=5", gotQuery)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "DECISION") ||
		!strings.Contains(lines[1], "allowed.test A → 192.0.2.7") || !strings.Contains(lines[1], "allowOut allowed.test") ||
		!strings.Contains(lines[2], "tcp 192.0.2.8:80") || !strings.Contains(lines[2], "denied") {
		t.Errorf("table:\n%s", out)
	}
	out, err = cli("net", "log", "isb", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var es []audit.Entry
	if err := json.Unmarshal([]byte(out), &es); err != nil || len(es) != 2 || es[1].Port != 80 {
		t.Errorf("--json = %v %v: %s", es, err, out)
	}
	if _, err := cli("net", "log", "inope"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("unknown sandbox: %v", err)
	}
}
