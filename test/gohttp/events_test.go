//go:build e2e

package gohttp

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// E2B's lifecycle events and webhooks (spec §12; internal/events,
// internal/webhooks).

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// sandboxEvent is E2B's SandboxEvent.
type sandboxEvent struct {
	ID                 string         `json:"id"`
	Version            string         `json:"version"`
	Type               string         `json:"type"`
	Timestamp          string         `json:"timestamp"`
	EventData          map[string]any `json:"eventData"`
	SandboxID          string         `json:"sandboxId"`
	SandboxExecutionID string         `json:"sandboxExecutionId"`
	SandboxTemplateID  string         `json:"sandboxTemplateId"`
	SandboxBuildID     string         `json:"sandboxBuildId"`
	SandboxTeamID      string         `json:"sandboxTeamId"`
}

const lc = "sandbox.lifecycle."

func (e env) events(t *testing.T, path string) []sandboxEvent {
	t.Helper()
	r := e.api(t, http.MethodGet, path, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, r.status, r.body)
	}
	if !strings.HasPrefix(strings.TrimSpace(string(r.body)), "[") {
		t.Fatalf("GET %s: %s, want a bare JSON array", path, r.body)
	}
	var out []sandboxEvent
	r.json(t, &out)
	return out
}

func eventTypes(es []sandboxEvent) []string {
	var out []string
	for _, e := range es {
		out = append(out, strings.TrimPrefix(e.Type, lc))
	}
	return out
}

// checkExecution checks eventData.execution of killed and paused.
func checkExecution(t *testing.T, ev sandboxEvent) {
	t.Helper()
	x, ok := ev.EventData["execution"].(map[string]any)
	if !ok {
		t.Fatalf("%s: no eventData.execution in %v", ev.Type, ev.EventData)
	}
	requireKeys(t, ev.Type+" execution", x, "started_at", "vcpu_count", "memory_mb", "execution_time")
	if _, err := time.Parse(time.RFC3339, fmt.Sprint(x["started_at"])); err != nil {
		t.Errorf("%s: started_at %v: %v", ev.Type, x["started_at"], err)
	}
	if x["vcpu_count"].(float64) < 1 || x["memory_mb"].(float64) < 128 || x["execution_time"].(float64) < 0 {
		t.Errorf("%s: execution %v", ev.Type, x)
	}
}

// TestLifecycleEvents: create, timeout change, pause, resume, snapshot,
// kill and a timeout kill each record E2B's event, in order, with its
// shape; the query parameters and errors are E2B's.
func TestLifecycleEvents(t *testing.T) {
	e := loadEnv(t)
	tag := uniqueTag(t)
	s := e.createV1(t, 300, map[string]string{"test": "events-" + tag})
	id := s.SandboxID
	step := func(method, path string, body any, want int) {
		t.Helper()
		if r := e.api(t, method, path, body); r.status != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, r.status, r.body, want)
		}
	}
	step(http.MethodPost, "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 250}, http.StatusNoContent)
	step(http.MethodPost, "/sandboxes/"+id+"/pause", nil, http.StatusNoContent)
	step(http.MethodPost, "/sandboxes/"+id+"/resume", map[string]any{"timeout": 300}, http.StatusCreated)
	step(http.MethodPost, "/sandboxes/"+id+"/snapshots", map[string]any{}, http.StatusCreated)
	step(http.MethodDelete, "/sandboxes/"+id, nil, http.StatusNoContent)

	// A kill answers before its row (and so its event) is written: the
	// event follows within moments.
	want := []string{"created", "updated", "paused", "resumed", "checkpointed", "killed"}
	var es []sandboxEvent
	if !waitFor(10*time.Second, 50*time.Millisecond, func() bool {
		es = e.events(t, "/events/sandboxes/"+id+"?orderAsc=true&limit=100")
		return len(es) >= len(want)
	}) || !slices.Equal(eventTypes(es), want) {
		t.Fatalf("events of %s: %v, want %v", id, eventTypes(es), want)
	}
	var prev time.Time
	for i, ev := range es {
		if !uuidRE.MatchString(ev.ID) || !uuidRE.MatchString(ev.SandboxTeamID) || !uuidRE.MatchString(ev.SandboxExecutionID) {
			t.Errorf("event %d: ids %q %q %q, want UUIDs", i, ev.ID, ev.SandboxTeamID, ev.SandboxExecutionID)
		}
		ts, err := time.Parse(time.RFC3339Nano, ev.Timestamp)
		if err != nil || ts.Before(prev) {
			t.Errorf("event %d: timestamp %q (%v) not after %v", i, ev.Timestamp, err, prev)
		}
		prev = ts
		if ev.Version != "v1" || ev.SandboxID != id || ev.SandboxTemplateID != "base" || ev.SandboxBuildID == "" {
			t.Errorf("event %d: %+v", i, ev)
		}
		md, _ := ev.EventData["sandbox_metadata"].(map[string]any)
		if md["test"] != "events-"+tag {
			t.Errorf("event %s: eventData.sandbox_metadata = %v", ev.Type, ev.EventData["sandbox_metadata"])
		}
	}
	// Executions: create starts one, resume another.
	if x := es[0].SandboxExecutionID; es[1].SandboxExecutionID != x || es[2].SandboxExecutionID != x || es[3].SandboxExecutionID == x ||
		es[4].SandboxExecutionID != es[3].SandboxExecutionID || es[5].SandboxExecutionID != es[3].SandboxExecutionID {
		t.Errorf("execution ids %v", []string{es[0].SandboxExecutionID, es[1].SandboxExecutionID, es[2].SandboxExecutionID,
			es[3].SandboxExecutionID, es[4].SandboxExecutionID, es[5].SandboxExecutionID})
	}
	if st, err := time.Parse(time.RFC3339, fmt.Sprint(es[1].EventData["set_timeout"])); err != nil || time.Until(st) < 200*time.Second {
		t.Errorf("updated: set_timeout %v (%v), want about 250 s from now", es[1].EventData["set_timeout"], err)
	}
	checkExecution(t, es[2])
	checkExecution(t, es[5])
	if x := es[5].EventData["execution"].(map[string]any); x["started_at"] == es[2].EventData["execution"].(map[string]any)["started_at"] {
		t.Errorf("killed's execution started when paused's did: %v", x)
	}
	for _, i := range []int{0, 1, 3, 4} {
		if _, ok := es[i].EventData["execution"]; ok {
			t.Errorf("%s has an execution", es[i].Type)
		}
	}

	// Newest first by default, limit 10; offset, limit and types.
	if got := eventTypes(e.events(t, "/events/sandboxes/"+id)); !slices.Equal(got, []string{"killed", "checkpointed", "resumed", "paused", "updated", "created"}) {
		t.Errorf("default order: %v", got)
	}
	if got := eventTypes(e.events(t, "/events/sandboxes/"+id+"?orderAsc=true&offset=1&limit=2")); !slices.Equal(got, []string{"updated", "paused"}) {
		t.Errorf("offset 1 limit 2: %v", got)
	}
	if got := eventTypes(e.events(t, "/events/sandboxes/"+id+"?types="+lc+"killed&types="+lc+"paused")); !slices.Equal(got, []string{"killed", "paused"}) {
		t.Errorf("types killed, paused: %v", got)
	}
	team := e.events(t, "/events/sandboxes?limit=100")
	if !slices.ContainsFunc(team, func(ev sandboxEvent) bool { return ev.ID == es[5].ID }) {
		t.Errorf("team events (newest 100) lack %s's killed", id)
	}
	for _, bad := range []string{"?limit=0", "?limit=101", "?offset=-1", "?orderAsc=maybe", "?types=sandbox.lifecycle.exploded"} {
		errorBody(t, e.api(t, http.MethodGet, "/events/sandboxes/"+id+bad, nil), http.StatusBadRequest)
	}
	errorBody(t, e.api(t, http.MethodGet, "/events/sandboxes/nosuchsandbox00000000", nil), http.StatusNotFound)
	errorBody(t, e.apiWithKey(t, "wrong", http.MethodGet, "/events/sandboxes", nil), http.StatusUnauthorized)

	// A timeout kill is a killed event too.
	r := e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 2})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var short sandboxInfo
	r.json(t, &short)
	t.Cleanup(func() { e.kill(short.SandboxID) })
	var got []string
	if !waitFor(time.Minute, 250*time.Millisecond, func() bool {
		got = eventTypes(e.events(t, "/events/sandboxes/"+short.SandboxID+"?orderAsc=true"))
		return slices.Equal(got, []string{"created", "killed"})
	}) {
		t.Fatalf("events of a sandbox past its timeout: %v, want created, killed", got)
	}
}

// receiver is a webhook receiver: it verifies every request's signature
// as E2B's docs do and answers what mode says.
type receiver struct {
	srv    *httptest.Server
	secret string

	mu sync.Mutex
	// fail answers this many requests of events of type failType 500
	// first; hold parks requests until release is closed.
	fail     int
	failType string
	hold     bool
	held     int
	release  chan struct{}
	got      []delivered
}

type delivered struct {
	event      sandboxEvent
	deliveryID string
	webhookID  string
	status     int
}

func newReceiver(t *testing.T, secret string) *receiver {
	rc := &receiver{secret: secret, release: make(chan struct{})}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		// E2B's documented verification: SHA-256 of secret + raw body,
		// base64 with + → -, / → _ and no padding.
		sum := sha256.Sum256(append([]byte(rc.secret), body...))
		want := strings.TrimRight(strings.NewReplacer("+", "-", "/", "_").Replace(base64.StdEncoding.EncodeToString(sum[:])), "=")
		if r.Header.Get("e2b-signature") != want || r.Header.Get("e2b-signature-version") != "v1" {
			t.Errorf("delivery with a bad signature: %v", r.Header)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ev sandboxEvent
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("delivery body %s: %v", body, err)
		}
		rc.mu.Lock()
		status := http.StatusOK
		switch {
		case rc.fail > 0 && ev.Type == rc.failType:
			rc.fail--
			status = http.StatusInternalServerError
		case rc.hold:
			rc.held++
			rc.mu.Unlock()
			select {
			case <-rc.release:
			case <-r.Context().Done():
			}
			rc.mu.Lock()
			status = http.StatusServiceUnavailable // whoever sent it is gone
		}
		rc.got = append(rc.got, delivered{event: ev, deliveryID: r.Header.Get("e2b-delivery-id"), webhookID: r.Header.Get("e2b-webhook-id"), status: status})
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(func() {
		rc.mu.Lock()
		if rc.hold {
			close(rc.release)
			rc.hold = false
		}
		rc.mu.Unlock()
		rc.srv.Close()
	})
	return rc
}

// deliveries returns the requests the receiver got for sandboxID's events.
func (rc *receiver) deliveries(sandboxID string) []delivered {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []delivered
	for _, d := range rc.got {
		if d.event.SandboxID == sandboxID {
			out = append(out, d)
		}
	}
	return out
}

func acked(ds []delivered) []string {
	var out []string
	for _, d := range ds {
		if d.status == http.StatusOK {
			out = append(out, strings.TrimPrefix(d.event.Type, lc))
		}
	}
	return out
}

// TestWebhooks: CRUD with E2B's shapes (the secret never shown); a private
// URL refused without --webhook-allow-private; with it, signed deliveries
// of every event, retried after 500s under the same event id; and a daemon
// SIGKILLed in the middle of a delivery delivers it after its restart under
// the same event id, once acknowledged.
func TestWebhooks(t *testing.T) {
	e := loadEnv(t)
	rc := newReceiver(t, "whsec-"+uniqueTag(t))

	// Refused while the daemon has no --webhook-allow-private.
	r := e.api(t, http.MethodPost, "/events/webhooks", map[string]any{"name": "local", "url": rc.srv.URL, "events": []string{lc + "created"}, "signatureSecret": "x"})
	errorBody(t, r, http.StatusBadRequest)
	if !strings.Contains(string(r.body), "--webhook-allow-private") {
		t.Errorf("private URL refusal %s does not name the flag", r.body)
	}

	// CRUD on a public URL (not resolvable here: checked again when a
	// delivery connects).
	create := map[string]any{"name": "crud", "url": "https://hooks.example.com/e2b", "events": []string{lc + "created", lc + "killed"}, "signatureSecret": "topsecret"}
	r = e.api(t, http.MethodPost, "/events/webhooks", create)
	if r.status != http.StatusCreated {
		t.Fatalf("POST /events/webhooks: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), "topsecret") || strings.Contains(string(r.body), "ignatureSecret") {
		t.Errorf("the secret is returned: %s", r.body)
	}
	var wh map[string]any
	r.json(t, &wh)
	requireKeys(t, "WebhookCreation", wh, "id", "teamId", "name", "createdAt", "url", "enabled", "events")
	whID := fmt.Sprint(wh["id"])
	if wh["enabled"] != true || wh["name"] != "crud" {
		t.Errorf("created %v", wh)
	}
	r = e.api(t, http.MethodPatch, "/events/webhooks/"+whID, map[string]any{"signatureSecret": "rotated"})
	if r.status != http.StatusOK || strings.Contains(string(r.body), "rotated") {
		t.Fatalf("PATCH secret: %d %s", r.status, r.body)
	}
	assertWebhookSecretSealed(t, whID, "rotated")
	r = e.api(t, http.MethodPatch, "/events/webhooks/"+whID, map[string]any{"enabled": false, "name": "renamed"})
	r.json(t, &wh)
	if r.status != http.StatusOK || wh["enabled"] != false || wh["name"] != "renamed" || len(wh["events"].([]any)) != 2 {
		t.Fatalf("PATCH: %d %s", r.status, r.body)
	}
	r = e.api(t, http.MethodGet, "/events/webhooks", nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), whID) || strings.Contains(string(r.body), "rotated") {
		t.Fatalf("GET /events/webhooks: %d %s", r.status, r.body)
	}
	for _, bad := range []map[string]any{
		{"url": "https://a.example.com", "events": []string{lc + "created"}, "signatureSecret": "s"},
		{"name": "n", "url": "https://a.example.com", "events": []string{"sandbox.lifecycle.exploded"}, "signatureSecret": "s"},
		{"name": "n", "url": "notaurl", "events": []string{lc + "created"}, "signatureSecret": "s"},
		{"name": "n", "url": "https://a.example.com", "events": []string{lc + "created"}},
	} {
		errorBody(t, e.api(t, http.MethodPost, "/events/webhooks", bad), http.StatusBadRequest)
	}
	errorBody(t, e.api(t, http.MethodGet, "/events/webhooks/nosuchwebhook", nil), http.StatusNotFound)
	if r := e.api(t, http.MethodDelete, "/events/webhooks/"+whID, nil); r.status != http.StatusOK {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	errorBody(t, e.api(t, http.MethodDelete, "/events/webhooks/"+whID, nil), http.StatusNotFound)

	// Allowed with the flag; retries 1 s apart for the test.
	flags := []string{"--webhook-allow-private", "--webhook-retry-interval", "1s"}
	restartDaemonArgs(t, e, nil, flags, func() {})
	r = e.api(t, http.MethodPost, "/events/webhooks", map[string]any{"name": "receiver", "url": rc.srv.URL,
		"events": []string{lc + "created", lc + "killed", lc + "paused", lc + "resumed", lc + "updated", lc + "checkpointed"}, "signatureSecret": rc.secret})
	if r.status != http.StatusCreated {
		t.Fatalf("POST /events/webhooks (allowed): %d %s", r.status, r.body)
	}
	r.json(t, &wh)
	whID = fmt.Sprint(wh["id"])
	t.Cleanup(func() { e.api(t, http.MethodDelete, "/events/webhooks/"+whID, nil) })

	// Two 500s, then success: the created event arrives three times under
	// one event id, with three delivery ids.
	rc.mu.Lock()
	rc.fail, rc.failType = 2, lc+"created"
	rc.mu.Unlock()
	s := e.createV1(t, 300, map[string]string{"test": "webhooks"})
	if r := e.api(t, http.MethodDelete, "/sandboxes/"+s.SandboxID, nil); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	var ds []delivered
	if !waitFor(time.Minute, 200*time.Millisecond, func() bool {
		ds = rc.deliveries(s.SandboxID)
		a := acked(ds)
		return slices.Contains(a, "created") && slices.Contains(a, "killed")
	}) {
		t.Fatalf("deliveries of %s: %+v", s.SandboxID, ds)
	}
	stored := e.events(t, "/events/sandboxes/"+s.SandboxID+"?orderAsc=true")
	byType := map[string]string{}
	for _, ev := range stored {
		byType[ev.Type] = ev.ID
	}
	var createdAttempts []delivered
	for _, d := range ds {
		if d.event.ID != byType[d.event.Type] {
			t.Errorf("delivered %s under id %s, the API has %s", d.event.Type, d.event.ID, byType[d.event.Type])
		}
		if d.webhookID != whID {
			t.Errorf("e2b-webhook-id %q, want %s", d.webhookID, whID)
		}
		if d.event.Type == lc+"created" {
			createdAttempts = append(createdAttempts, d)
		}
	}
	if len(createdAttempts) != 3 || createdAttempts[0].deliveryID == createdAttempts[1].deliveryID || createdAttempts[1].deliveryID == createdAttempts[2].deliveryID {
		t.Errorf("created attempts %+v: want 3 with distinct delivery ids", createdAttempts)
	}
	if got := acked(ds); len(got) != 2 {
		t.Errorf("acknowledged %v, want created and killed once each", got)
	}

	// The deliveries and stats endpoints.
	r = e.api(t, http.MethodGet, "/events/webhooks/"+whID+"/deliveries?limit=100", nil)
	var page struct {
		Data []struct {
			EventID   string           `json:"eventId"`
			EventType string           `json:"eventType"`
			SandboxID string           `json:"sandboxId"`
			Attempts  []map[string]any `json:"attempts"`
		} `json:"data"`
		NextCursor *string `json:"nextCursor"`
	}
	r.json(t, &page)
	found := false
	for _, g := range page.Data {
		if g.EventID == byType[lc+"created"] {
			found = true
			if len(g.Attempts) != 3 {
				t.Errorf("delivery group of created: %d attempts, want 3", len(g.Attempts))
			}
			for _, a := range g.Attempts {
				requireKeys(t, "WebhookDelivery", a, "id", "teamId", "webhookId", "eventId", "sandboxId", "eventType", "status",
					"durationMs", "requestBody", "requestHeaders", "requestUrl", "errorClass", "timestamp")
				if strings.Contains(fmt.Sprint(a["requestHeaders"]), createdAttempts[0].deliveryID) && a["status"] != "failed" {
					t.Errorf("first attempt %v, want failed", a)
				}
			}
		}
	}
	if r.status != http.StatusOK || !found || page.NextCursor != nil {
		t.Fatalf("deliveries: %d %s", r.status, r.body)
	}
	r = e.api(t, http.MethodGet, "/events/webhooks/"+whID+"/stats", nil)
	var stats struct {
		Total      int              `json:"total"`
		Failed     int              `json:"failed"`
		Buckets    []map[string]any `json:"buckets"`
		DurationMs map[string]any   `json:"durationMs"`
	}
	r.json(t, &stats)
	if r.status != http.StatusOK || stats.Total < 4 || stats.Failed < 2 || len(stats.Buckets) == 0 {
		t.Fatalf("stats: %d %s", r.status, r.body)
	}

	// SIGKILL in the middle of a delivery: the receiver holds the request;
	// the daemon dies; after the restart the delivery comes again, with
	// the same event id, once the dead daemon's lease ran out.
	rc.mu.Lock()
	rc.hold = true
	rc.mu.Unlock()
	s2 := e.createV1(t, 300, map[string]string{"test": "webhooks-crash"})
	restartDaemonArgs(t, e, func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return rc.held > 0
	}, flags, func() {
		rc.mu.Lock()
		rc.hold = false
		close(rc.release)
		rc.mu.Unlock()
	})
	if r := e.api(t, http.MethodDelete, "/sandboxes/"+s2.SandboxID, nil); r.status != http.StatusNoContent {
		t.Fatalf("kill after the restart: %d %s", r.status, r.body)
	}
	if !waitFor(2*time.Minute, 250*time.Millisecond, func() bool {
		ds = rc.deliveries(s2.SandboxID)
		a := acked(ds)
		return slices.Contains(a, "created") && slices.Contains(a, "killed")
	}) {
		t.Fatalf("deliveries of %s after the restart: %+v", s2.SandboxID, ds)
	}
	stored = e.events(t, "/events/sandboxes/"+s2.SandboxID+"?orderAsc=true")
	if got := eventTypes(stored); !slices.Equal(got, []string{"created", "killed"}) {
		t.Fatalf("events of %s across the restart: %v", s2.SandboxID, got)
	}
	ids := map[string]string{}
	for _, d := range ds {
		if prev, ok := ids[d.event.Type]; ok && prev != d.event.ID {
			t.Errorf("%s delivered under two ids: %s and %s", d.event.Type, prev, d.event.ID)
		}
		ids[d.event.Type] = d.event.ID
	}
	if ids[lc+"created"] != stored[0].ID || len(acked(ds)) != 2 {
		t.Errorf("deliveries %+v; the API has %s", ds, stored[0].ID)
	}
	if n := len(ds); n < 3 {
		t.Errorf("%d requests for %s, want the held one, its redelivery and killed", n, s2.SandboxID)
	}
}

// TestKilledEventOnceAcrossCrash: a kill answers before its row is deleted
// (in the background); a daemon SIGKILLed right after the answer finishes
// the kill at its next start, and the sandbox has exactly one killed event
// (recorded with the row's deletion, whichever daemon deleted it).
func TestKilledEventOnceAcrossCrash(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 300, map[string]string{"test": "events-crash"})
	restartDaemonArgs(t, e, func() bool {
		r := e.api(t, http.MethodDelete, "/sandboxes/"+s.SandboxID, nil)
		if r.status != http.StatusNoContent {
			t.Fatalf("kill: %d %s", r.status, r.body)
		}
		return true
	}, nil, func() {})
	var got []string
	if !waitFor(30*time.Second, 250*time.Millisecond, func() bool {
		got = eventTypes(e.events(t, "/events/sandboxes/"+s.SandboxID+"?orderAsc=true"))
		return slices.Equal(got, []string{"created", "killed"})
	}) {
		t.Fatalf("events after a kill and a SIGKILL: %v, want created, killed", got)
	}
	time.Sleep(2 * time.Second) // nothing more comes
	if got = eventTypes(e.events(t, "/events/sandboxes/"+s.SandboxID+"?orderAsc=true")); !slices.Equal(got, []string{"created", "killed"}) {
		t.Fatalf("events later: %v", got)
	}
}
