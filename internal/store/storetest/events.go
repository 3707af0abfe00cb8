package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// testHook records "created" for a new row, "killed" for a deleted one and
// "changed" for a state change and "snapshot" for a snapshot of a sandbox
// with a row, each with the execution of the last "created" (LastEvent); a
// sandbox whose metadata has "fail" aborts.
func testHook(ctx context.Context, tx store.EventTx, c store.Change) ([]*store.Event, error) {
	old, cur := c.Old, c.New
	row := cur
	if row == nil {
		row = old
	}
	if row == nil {
		return nil, nil
	}
	if row.Metadata["fail"] != "" {
		return nil, errors.New("hook refused")
	}
	e := &store.Event{ID: fmt.Sprintf("%s-%d", row.ID, time.Now().UnixNano()), SandboxID: row.ID, Timestamp: time.Now().UTC(),
		TemplateID: row.TemplateID, TeamID: "team", Data: `{"k":"v"}`}
	switch {
	case c.Snapshot != nil:
		e.Type = "snapshot"
	case old == nil:
		e.Type, e.ExecutionID = "created", "exec-"+row.ID
		return []*store.Event{e}, nil
	case cur == nil:
		e.Type = "killed"
	case old.State != cur.State:
		e.Type = "changed"
	default:
		return nil, nil
	}
	last, err := tx.LastEvent(ctx, row.ID, "created")
	if err != nil {
		return nil, err
	}
	if last != nil {
		e.ExecutionID = last.ExecutionID
	}
	return []*store.Event{e}, nil
}

func types(es []*store.Event) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.SandboxID+":"+e.Type)
	}
	return out
}

func testEventsWithSandboxChanges(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	st := open(t)
	st.SetEventHook(testHook)
	base := time.Now()
	for _, id := range []string{"a", "b"} {
		if err := st.PutSandbox(ctx, SampleSandbox(id, base)); err != nil {
			t.Fatal(err)
		}
	}
	// The same row again: no event. A state change: one.
	a := SampleSandbox("a", base)
	if err := st.PutSandbox(ctx, a); err != nil {
		t.Fatal(err)
	}
	a.State = "paused"
	if err := st.PutSandbox(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteSandbox(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// A second delete finds no row: ErrNotFound and no second event.
	if err := st.DeleteSandbox(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second DeleteSandbox = %v, want ErrNotFound", err)
	}
	// A snapshot of b records an event; one of a sandbox without a row
	// records none.
	if err := st.PutSnapshot(ctx, &store.Snapshot{ID: "snap1", SandboxID: "b", CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSnapshot(ctx, &store.Snapshot{ID: "snap2", SandboxID: "gone", CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	// A hook error aborts the change: no row, no event.
	bad := SampleSandbox("c", base)
	bad.Metadata = map[string]string{"fail": "1"}
	if err := st.PutSandbox(ctx, bad); err == nil {
		t.Fatal("PutSandbox with a failing hook succeeded")
	}
	if _, err := st.GetSandbox(ctx, "c"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("row of a failed hook: GetSandbox = %v, want ErrNotFound", err)
	}

	all, err := st.ListEvents(ctx, store.EventQuery{Limit: 100, Asc: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := types(all), []string{"a:created", "b:created", "a:changed", "a:killed", "b:snapshot"}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	for _, e := range all {
		if e.SandboxID == "a" && e.ExecutionID != "exec-a" {
			t.Errorf("event %s of a: execution %q, want exec-a (LastEvent)", e.Type, e.ExecutionID)
		}
		if e.Data != `{"k":"v"}` || e.TeamID != "team" || e.TemplateID != "base" || e.Timestamp.Location() != time.UTC {
			t.Errorf("event %+v: fields did not round-trip", e)
		}
	}
	desc, _ := st.ListEvents(ctx, store.EventQuery{Limit: 2})
	if got, want := types(desc), []string{"b:snapshot", "a:killed"}; !slices.Equal(got, want) {
		t.Errorf("newest two = %v, want %v", got, want)
	}
	page, _ := st.ListEvents(ctx, store.EventQuery{Limit: 2, Offset: 1, Asc: true, SandboxID: "a"})
	if got, want := types(page), []string{"a:changed", "a:killed"}; !slices.Equal(got, want) {
		t.Errorf("a's events from offset 1 = %v, want %v", got, want)
	}
	typed, _ := st.ListEvents(ctx, store.EventQuery{Limit: 10, Types: []string{"created", "killed"}, Asc: true})
	if got, want := types(typed), []string{"a:created", "b:created", "a:killed"}; !slices.Equal(got, want) {
		t.Errorf("created and killed = %v, want %v", got, want)
	}
	// Retention.
	n, err := st.DeleteEventsBefore(ctx, time.Now().Add(time.Hour))
	if err != nil || n != 5 {
		t.Fatalf("DeleteEventsBefore = %d, %v; want 5", n, err)
	}
}

func testWebhookDeliveries(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	st := open(t)
	st.SetEventHook(testHook)
	now := time.Now().UTC().Truncate(time.Microsecond)
	on := &store.Webhook{ID: "w1", Name: "one", URL: "https://example.com/h", Events: []string{"created"}, Enabled: true, Secret: "s1", CreatedAt: now}
	off := &store.Webhook{ID: "w2", Name: "two", URL: "https://example.com/h2", Events: []string{"created"}, Enabled: false, Secret: "s2", CreatedAt: now.Add(time.Second)}
	for _, w := range []*store.Webhook{on, off} {
		if err := st.CreateWebhook(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.GetWebhook(ctx, "w1")
	if err != nil || got.Secret != "s1" || !got.CreatedAt.Equal(now) || !slices.Equal(got.Events, on.Events) || !got.Enabled {
		t.Fatalf("GetWebhook = %+v, %v", got, err)
	}
	on.Name = "renamed"
	if err := st.UpdateWebhook(ctx, on); err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateWebhook(ctx, &store.Webhook{ID: "nope"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("UpdateWebhook(unknown) = %v, want ErrNotFound", err)
	}
	list, _ := st.ListWebhooks(ctx)
	if len(list) != 2 || list[0].Name != "renamed" {
		t.Fatalf("ListWebhooks = %+v", list)
	}
	// ReplaceWebhookSecret is a compare-and-swap (re-sealing a legacy
	// secret at start races with a user's update).
	if ok, err := st.ReplaceWebhookSecret(ctx, "w2", "wrong", "x"); ok || err != nil {
		t.Fatalf("ReplaceWebhookSecret(stale old) = %v, %v; want false, nil", ok, err)
	}
	if ok, err := st.ReplaceWebhookSecret(ctx, "nope", "s2", "x"); ok || err != nil {
		t.Fatalf("ReplaceWebhookSecret(unknown) = %v, %v; want false, nil", ok, err)
	}
	if ok, err := st.ReplaceWebhookSecret(ctx, "w2", "s2", "s2b"); !ok || err != nil {
		t.Fatalf("ReplaceWebhookSecret = %v, %v; want true, nil", ok, err)
	}
	if got, err := st.GetWebhook(ctx, "w2"); err != nil || got.Secret != "s2b" || got.Name != "two" {
		t.Fatalf("after ReplaceWebhookSecret: %+v, %v", got, err)
	}

	// One event, one delivery (the disabled webhook gets none).
	if err := st.PutSandbox(ctx, SampleSandbox("s", now)); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.PendingDeliveries(ctx); n != 1 {
		t.Fatalf("pending = %d, want 1", n)
	}
	ds, err := st.ClaimDeliveries(ctx, "A", time.Minute, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim A = %d, %v; want 1", len(ds), err)
	}
	d := ds[0]
	if d.WebhookID != "w1" || d.URL != on.URL || d.Secret != "s1" || d.Event.Type != "created" || d.Event.SandboxID != "s" || d.Attempts != 0 {
		t.Fatalf("claimed %+v / %+v", d, d.Event)
	}
	// Leased: nobody else gets it; a non-holder's finish does not end it.
	if ds, _ := st.ClaimDeliveries(ctx, "B", time.Minute, 10); len(ds) != 0 {
		t.Fatalf("claim B during A's lease = %d, want 0", len(ds))
	}
	attempt := func(id, status string) *store.DeliveryAttempt {
		return &store.DeliveryAttempt{ID: id, WebhookID: "w1", EventID: d.Event.ID, SandboxID: "s", EventType: "created", Status: status,
			DurationMs: 3, RequestURL: on.URL, ResponseStatus: 500, ErrorClass: "http_error", Timestamp: time.Now().UTC()}
	}
	if err := st.FinishDelivery(ctx, "B", d, attempt("x0", "failed"), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.PendingDeliveries(ctx); n != 1 {
		t.Fatalf("pending after a non-holder's finish = %d, want 1", n)
	}
	// A fails it with a retry due now: B claims it next, same event.
	if err := st.FinishDelivery(ctx, "A", d, attempt("x1", "failed"), time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	ds, _ = st.ClaimDeliveries(ctx, "B", time.Millisecond, 10)
	if len(ds) != 1 || ds[0].Event.ID != d.Event.ID || ds[0].Attempts != 1 {
		t.Fatalf("retry claim = %+v, want the same event with 1 attempt", ds)
	}
	// B's lease runs out (B died): C claims the same event.
	time.Sleep(20 * time.Millisecond)
	ds, _ = st.ClaimDeliveries(ctx, "C", time.Minute, 10)
	if len(ds) != 1 || ds[0].Event.ID != d.Event.ID {
		t.Fatalf("claim after the lease ran out = %+v", ds)
	}
	ok := attempt("x2", "success")
	ok.ResponseStatus, ok.ErrorClass = 200, ""
	if err := st.FinishDelivery(ctx, "C", ds[0], ok, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.PendingDeliveries(ctx); n != 0 {
		t.Fatalf("pending after success = %d, want 0", n)
	}
	as, err := st.ListAttempts(ctx, store.AttemptQuery{WebhookID: "w1", Asc: true})
	if err != nil || len(as) != 3 || as[2].Status != "success" || as[0].ErrorClass != "http_error" {
		t.Fatalf("attempts = %+v, %v", as, err)
	}
	if as, _ := st.ListAttempts(ctx, store.AttemptQuery{WebhookID: "w1", Status: []string{"success"}}); len(as) != 1 {
		t.Fatalf("successful attempts = %d, want 1", len(as))
	}
	// Deleting a webhook drops its pending deliveries.
	if err := st.PutSandbox(ctx, SampleSandbox("s2", now)); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteWebhook(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.PendingDeliveries(ctx); n != 0 {
		t.Fatalf("pending after deleting the webhook = %d, want 0", n)
	}
	if err := st.DeleteWebhook(ctx, "w1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second DeleteWebhook = %v, want ErrNotFound", err)
	}
}

// testConcurrentClaims: two handles (two daemons) claim at once; every
// delivery goes to exactly one.
func testConcurrentClaims(t *testing.T, open Opener) {
	ctx := ctxFor(t)
	st1, st2 := open(t), open(t)
	st1.SetEventHook(testHook)
	if err := st1.CreateWebhook(ctx, &store.Webhook{ID: "w", URL: "https://example.com", Events: []string{"created"}, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	const n = 30
	for i := range n {
		if err := st1.PutSandbox(ctx, SampleSandbox(fmt.Sprintf("c%02d", i), time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]string{}
	var wg sync.WaitGroup
	for i, st := range []store.Full{st1, st2, st1, st2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("o%d", i)
			for {
				ds, err := st.ClaimDeliveries(ctx, owner, time.Minute, 3)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ds) == 0 {
					return
				}
				mu.Lock()
				for _, d := range ds {
					if prev, ok := seen[d.Event.ID]; ok {
						t.Errorf("event %s claimed by %s and %s", d.Event.ID, prev, owner)
					}
					seen[d.Event.ID] = owner
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("claimed %d deliveries, want %d", len(seen), n)
	}
}
