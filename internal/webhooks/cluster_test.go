package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/postgres"
	"github.com/airlock-sandbox/airlock/internal/store/postgres/pgtest"
)

// TestTwoDeliverersOnePostgres is the api tier of a cluster: two
// deliverers (two api instances, each with its own store handle) share one
// PostgreSQL. Every event is acknowledged once; when the instance holding
// a delivery dies in the middle of it, the other delivers it once the
// lease ran out, under the same event id.
func TestTwoDeliverersOnePostgres(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	open := func() *postgres.DB {
		db, err := postgres.Open(context.Background(), url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	node, apiA, apiB := open(), open(), open()
	rec := &events.Recorder{TeamID: "team"}
	node.SetEventHook(rec.Hook)

	var mu sync.Mutex
	acked := map[string]int{} // event id → 2xx answers
	var heldID string
	held := make(chan struct{})
	release := make(chan struct{})
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var ev events.SandboxEvent
		_ = json.Unmarshal(b, &ev)
		mu.Lock()
		if ev.SandboxID == "held" && heldID == "" {
			heldID = ev.ID
			mu.Unlock()
			close(held)
			select { // park it until the sender is gone
			case <-r.Context().Done():
			case <-release:
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		acked[ev.ID]++
		mu.Unlock()
	}))
	defer rcv.Close()
	defer close(release)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := apiA.CreateWebhook(ctx, &store.Webhook{ID: "wh", URL: rcv.URL, Events: events.Types, Enabled: true, Secret: "s"}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{AllowPrivate: true, RetryInterval: 100 * time.Millisecond, Poll: 20 * time.Millisecond, Timeout: 5 * time.Second, Lease: 2 * time.Second}

	// A alone first: it takes the held delivery and dies with it.
	actx, killA := context.WithCancel(ctx)
	ca := cfg
	ca.Store = apiA
	go New(ca).Run(actx)
	if err := node.PutSandbox(ctx, &store.Sandbox{ID: "held", State: "running"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the first delivery never came")
	}
	killA()

	// B, and A restarted: 20 more events, each acknowledged once, and the
	// held one redelivered under its id.
	cb := cfg
	cb.Store = apiB
	go New(cb).Run(ctx)
	ca2 := cfg
	ca2.Store = apiA
	go New(ca2).Run(ctx)
	for i := range 20 {
		if err := node.PutSandbox(ctx, &store.Sandbox{ID: fmt.Sprintf("s%02d", i), State: "running"}); err != nil {
			t.Fatal(err)
		}
	}
	for n, _ := node.PendingDeliveries(ctx); n > 0; n, _ = node.PendingDeliveries(ctx) {
		if ctx.Err() != nil {
			t.Fatalf("%d deliveries still pending", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) != 21 {
		t.Fatalf("%d events acknowledged, want 21", len(acked))
	}
	for id, n := range acked {
		if n != 1 {
			t.Errorf("event %s acknowledged %d times", id, n)
		}
	}
	if acked[heldID] != 1 {
		t.Errorf("the held event %s was not redelivered under its id (acked: %v)", heldID, acked)
	}
}
