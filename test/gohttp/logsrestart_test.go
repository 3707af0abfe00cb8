//go:build e2e

package gohttp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestLogsSurviveRestart: the lifecycle events (GET /sandboxes/{id}/logs,
// v1 and v2) and the egress audit log (GET /sandboxes/{id}/network/log) of
// a running and of a paused sandbox are the same after the daemon is
// SIGKILLed and restarted, new entries come after them, and the files go
// with the sandbox.
//
// The audit entries come from real traffic: each sandbox (allowOut A,
// denyOut 0.0.0.0/0) connects to A (allowed) and B (denied), two addresses
// of a namespace this test creates in AIRLOCK_E2E_EXT_NET (.24/29; no
// server listens there: A answers with a reset, B is never reached, and the
// audit records the first packet either way).
func TestLogsSurviveRestart(t *testing.T) {
	e := loadEnv(t)
	ext := os.Getenv("AIRLOCK_E2E_EXT_NET")
	if ext == "" {
		ext = "10.78.255"
	}
	tag := uniqueTag(t)[:6]
	ns, hostIf, nsIf := "e2e-lr-"+tag, "e2lr"+tag, "e2ls"+tag
	hostIP, ipA, ipB := ext+".25", ext+".26", ext+".27"
	ip := extNS(t, ns, hostIf, nsIf, hostIP+"/29")
	ip("-n", ns, "addr", "add", ipA+"/29", "dev", nsIf)
	ip("-n", ns, "addr", "add", ipB+"/29", "dev", nsIf)
	ip("-n", ns, "route", "add", "default", "via", hostIP)

	policy := map[string]any{"allowOut": []string{ipA}, "denyOut": []string{"0.0.0.0/0"}}
	connect := func(s sandboxInfo) {
		t.Helper()
		e.run(t, s, "user", fmt.Sprintf("curl -sS -m 1 http://%s:8080/; curl -sS -m 1 http://%s:8080/; true", ipA, ipB), time.Minute)
	}
	audit := func(id string) (entries []map[string]any, dropped float64) {
		t.Helper()
		r := e.api(t, http.MethodGet, "/sandboxes/"+id+"/network/log", nil)
		if r.status != http.StatusOK {
			t.Fatalf("network log of %s: %d %s", id, r.status, r.body)
		}
		var body struct {
			Entries []map[string]any `json:"entries"`
			Dropped float64          `json:"dropped"`
		}
		r.json(t, &body)
		return body.Entries, body.Dropped
	}
	// count is how many connection entries to ip:8080 with decision and
	// rule the log holds.
	count := func(es []map[string]any, ip, decision, rule string) int {
		n := 0
		for _, en := range es {
			if en["kind"] == "connection" && en["ip"] == ip && en["port"] == float64(8080) && en["decision"] == decision && en["rule"] == rule {
				n++
			}
		}
		return n
	}
	both := func(es []map[string]any) (int, int) {
		return count(es, ipA, "allowed", "allowOut "+ipA), count(es, ipB, "denied", "denyOut 0.0.0.0/0")
	}
	// events are the daemon's own entries (the agent's process events are
	// read from its log in the sandbox directory, not from the store).
	events := func(path string) []map[string]any {
		t.Helper()
		r := e.api(t, http.MethodGet, path, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		var body map[string]json.RawMessage
		r.json(t, &body)
		key := "logEntries"
		if strings.HasPrefix(path, "/v2/") {
			key = "logs"
		}
		var all, out []map[string]any
		if err := json.Unmarshal(body[key], &all); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, r.body)
		}
		if d := string(body["dropped"]); d != "0" {
			t.Errorf("GET %s: dropped = %s, want 0", path, d)
		}
		for _, en := range all {
			if f, _ := en["fields"].(map[string]any); f["source"] != "agent" {
				out = append(out, en)
			}
		}
		return out
	}
	messages := func(es []map[string]any) string {
		var ms []string
		for _, en := range es {
			ms = append(ms, fmt.Sprint(en["message"]))
		}
		return strings.Join(ms, "|")
	}

	// Two sandboxes: one stays running, one is paused across the restart.
	type snap struct {
		s              sandboxInfo
		v1, v2, egress []map[string]any
	}
	var sbs []*snap
	for _, name := range []string{"running", "paused"} {
		s := e.createV1(t, 300, map[string]string{"test": "logs-restart-" + name})
		id := s.SandboxID
		if r := e.api(t, http.MethodPut, "/sandboxes/"+id+"/network", policy); r.status != http.StatusNoContent {
			t.Fatalf("PUT network: %d %s", r.status, r.body)
		}
		if r := e.api(t, http.MethodPost, "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 250}); r.status != http.StatusNoContent {
			t.Fatalf("timeout: %d %s", r.status, r.body)
		}
		connect(s)
		var es []map[string]any
		if !waitFor(15*time.Second, 200*time.Millisecond, func() bool {
			es, _ = audit(id)
			a, d := both(es)
			return a >= 1 && d >= 1
		}) {
			t.Fatalf("%s sandbox: audit log lacks the allowed and denied attempts: %v", name, es)
		}
		if name == "paused" {
			if r := e.api(t, http.MethodPost, "/sandboxes/"+id+"/pause", nil); r.status != http.StatusNoContent {
				t.Fatalf("pause: %d %s", r.status, r.body)
			}
		}
		sbs = append(sbs, &snap{s: s})
	}
	want := []string{"sandbox created", "sandbox network policy changed", "sandbox timeout changed"}
	for i, sn := range sbs {
		id := sn.s.SandboxID
		sn.v1 = events("/sandboxes/" + id + "/logs")
		sn.v2 = events("/v2/sandboxes/" + id + "/logs")
		sn.egress, _ = audit(id)
		w := strings.Join(want, "|")
		if i == 1 {
			w += "|sandbox paused"
		}
		if got := messages(sn.v1); got != w {
			t.Fatalf("positive control: events before the restart %q, want %q", got, w)
		}
		for _, suffix := range []string{".events.jsonl", ".egress.jsonl"} {
			if dd := os.Getenv("AIRLOCK_E2E_DATA_DIR"); dd != "" {
				if _, err := os.Stat(filepath.Join(dd, "logs", id+suffix)); err != nil {
					t.Errorf("no log file before the restart: %v", err)
				}
			}
		}
	}

	restartDaemon(t, e, func() {})

	prefix := func(what string, before, after []map[string]any) {
		t.Helper()
		if len(after) < len(before) || !reflect.DeepEqual(after[:len(before)], before) {
			t.Fatalf("%s after the restart does not start with what it held before:\nbefore %v\nafter  %v", what, before, after)
		}
	}
	for i, sn := range sbs {
		id := sn.s.SandboxID
		v1 := events("/sandboxes/" + id + "/logs")
		prefix("v1 logs of "+id, sn.v1, v1)
		prefix("v2 logs of "+id, sn.v2, events("/v2/sandboxes/"+id+"/logs"))
		if n := v1[len(v1)-1]["message"]; len(v1) <= len(sn.v1) || !strings.Contains(fmt.Sprint(n), "re-attached") {
			t.Errorf("newest event after the restart = %v, want one re-attach after the old ones", n)
		}
		es, dropped := audit(id)
		prefix("network log of "+id, sn.egress, es)
		if dropped != 0 {
			t.Errorf("network log dropped = %v, want 0", dropped)
		}
		// New entries come after the old ones.
		if i == 1 {
			if r := e.api(t, http.MethodPost, "/sandboxes/"+id+"/resume", map[string]any{"timeout": 200}); r.status != http.StatusCreated {
				t.Fatalf("resume after restart: %d %s", r.status, r.body)
			}
		}
		connect(sn.s)
		a0, d0 := both(sn.egress)
		if !waitFor(15*time.Second, 200*time.Millisecond, func() bool {
			es, _ = audit(id)
			a, d := both(es)
			return a > a0 && d > d0
		}) {
			t.Fatalf("no new audit entries after the restart: before %v, now %v", sn.egress, es)
		}
		prefix("network log of "+id+" after new traffic", sn.egress, es)
		if i == 1 {
			v1 = events("/sandboxes/" + id + "/logs")
			prefix("v1 logs of "+id+" after resume", sn.v1, v1)
			if n := v1[len(v1)-1]["message"]; n != "sandbox resumed" {
				t.Errorf("newest event after resume = %v, want sandbox resumed", n)
			}
		}
	}

	// The files go with the sandbox.
	for _, sn := range sbs {
		id := sn.s.SandboxID
		if r := e.api(t, http.MethodDelete, "/sandboxes/"+id, nil); r.status != http.StatusNoContent {
			t.Fatalf("kill: %d %s", r.status, r.body)
		}
		if dd := os.Getenv("AIRLOCK_E2E_DATA_DIR"); dd != "" {
			// A kill answers once the sandbox is stopped and cut off; its
			// files go in the background teardown, within seconds.
			var left []string
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				left, _ = filepath.Glob(filepath.Join(dd, "logs", id+".*"))
				if len(left) == 0 || time.Now().After(deadline) {
					break
				}
			}
			if len(left) > 0 {
				t.Errorf("log files left 30 s after kill: %v", left)
			}
		}
	}
}
