package events

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// fakeTx answers LastEvent with last.
type fakeTx struct{ last *store.Event }

func (f fakeTx) LastEvent(context.Context, string, ...string) (*store.Event, error) {
	return f.last, nil
}

func row(state string, end time.Time) *store.Sandbox {
	return &store.Sandbox{ID: "sb1", TemplateID: "base", TemplateHash: "h1", State: state, CPUCount: 2, MemoryMB: 512,
		EndAt: end, Metadata: map[string]string{"user": "ann"}}
}

func TestHookTypesAndData(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 10, 0, time.UTC)
	start := now.Add(-10 * time.Second)
	r := &Recorder{TeamID: "team", Now: func() time.Time { return now }}
	exec := fakeTx{last: &store.Event{ExecutionID: "exec1", Timestamp: start}}
	end := now.Add(time.Minute)
	cases := []struct {
		name     string
		c        store.Change
		want     string // "" = no event
		wantData string
	}{
		{"created", store.Change{New: row("running", end)}, Created, `{"sandbox_metadata":{"user":"ann"}}`},
		{"same row", store.Change{Old: row("running", end), New: row("running", end)}, "", ""},
		{"timeout", store.Change{Old: row("running", end), New: row("running", end.Add(time.Minute))}, Updated,
			`{"sandbox_metadata":{"user":"ann"},"set_timeout":"2026-11-28T12:02:10Z"}`},
		{"paused", store.Change{Old: row("running", end), New: row("paused", end)}, Paused,
			`{"sandbox_metadata":{"user":"ann"},"execution":{"started_at":"2026-11-28T12:00:00Z","vcpu_count":2,"memory_mb":512,"execution_time":10000}}`},
		{"resumed", store.Change{Old: row("paused", end), New: row("running", end)}, Resumed, `{"sandbox_metadata":{"user":"ann"}}`},
		{"killed", store.Change{Old: row("running", end)}, Killed,
			`{"sandbox_metadata":{"user":"ann"},"execution":{"started_at":"2026-11-28T12:00:00Z","vcpu_count":2,"memory_mb":512,"execution_time":10000}}`},
		{"checkpointed", store.Change{Old: row("running", end), New: row("running", end), Snapshot: &store.Snapshot{ID: "s"}}, Checkpointed,
			`{"sandbox_metadata":{"user":"ann"}}`},
		{"internal", store.Change{New: &store.Sandbox{ID: "x", State: "running", Metadata: map[string]string{"airlock.internal": "boot"}}}, "", ""},
		{"snapshot of a gone sandbox", store.Change{Snapshot: &store.Snapshot{ID: "s"}}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := r.Hook(context.Background(), exec, tc.c)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if len(evs) != 0 {
					t.Fatalf("events %+v, want none", evs[0])
				}
				return
			}
			if len(evs) != 1 {
				t.Fatalf("%d events, want 1", len(evs))
			}
			e := evs[0]
			if e.Type != tc.want || e.Data != tc.wantData || e.SandboxID != "sb1" || e.TeamID != "team" || e.BuildID != "h1" || e.TemplateID != "base" {
				t.Fatalf("event %+v, want type %s data %s", e, tc.want, tc.wantData)
			}
			newExec := tc.want == Created || tc.want == Resumed
			if newExec == (e.ExecutionID == "exec1") || e.ExecutionID == "" {
				t.Fatalf("execution id %q (new execution: %v)", e.ExecutionID, newExec)
			}
		})
	}
}

func TestWireShape(t *testing.T) {
	e := &store.Event{ID: "id1", Type: Killed, Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), SandboxID: "s",
		ExecutionID: "x", TemplateID: "t", BuildID: "b", TeamID: "tm"}
	b, _ := json.Marshal(Wire(e))
	want := `{"id":"id1","version":"v1","type":"sandbox.lifecycle.killed","timestamp":"2026-01-02T03:04:05Z","eventData":null,` +
		`"sandboxId":"s","sandboxExecutionId":"x","sandboxTemplateId":"t","sandboxBuildId":"b","sandboxTeamId":"tm"}`
	if string(b) != want {
		t.Fatalf("wire:\n%s\nwant\n%s", b, want)
	}
}
