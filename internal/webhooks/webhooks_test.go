package webhooks

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/sqlite"
)

// verify is E2B's documented verifier (its JS/Python/Go examples): SHA-256
// of secret + body, base64, '+' → '-', '/' → '_', '=' padding stripped.
func verify(secret string, body []byte, sig string) bool {
	sum := sha256.Sum256(append([]byte(secret), body...))
	want := base64.StdEncoding.EncodeToString(sum[:])
	want = strings.TrimRight(strings.NewReplacer("+", "-", "/", "_").Replace(want), "=")
	return want == sig
}

func TestSignMatchesE2BVerifier(t *testing.T) {
	for _, body := range []string{"", `{"id":"x"}`, strings.Repeat("ü", 100)} {
		if s := Sign("sec", []byte(body)); !verify("sec", []byte(body), s) || strings.ContainsAny(s, "+/=") {
			t.Errorf("Sign(%q) = %q does not verify", body, s)
		}
	}
}

func openStore(t *testing.T) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rec := &events.Recorder{TeamID: "team"}
	db.SetEventHook(rec.Hook)
	return db
}

type received struct {
	header http.Header
	body   []byte
}

// TestDeliveryRetriesThenSucceeds: a receiver that answers 500 twice gets
// the same event (same id, new delivery id each time, valid signature)
// until it answers 200; the attempts are recorded.
func TestDeliveryRetriesThenSucceeds(t *testing.T) {
	db := openStore(t)
	var mu sync.Mutex
	var got []received
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, received{r.Header.Clone(), b})
		mu.Unlock()
		if calls.Add(1) <= 2 {
			http.Error(w, "not yet", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := New(Config{Store: db, AllowPrivate: true, RetryInterval: 50 * time.Millisecond, Poll: 20 * time.Millisecond})
	if err := d.CheckURL(ctx, srv.URL); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateWebhook(ctx, &store.Webhook{ID: "wh", URL: srv.URL, Events: []string{events.Created}, Enabled: true, Secret: "s3cret"}); err != nil {
		t.Fatal(err)
	}
	if err := db.PutSandbox(ctx, &store.Sandbox{ID: "sb", State: "running", StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	go d.Run(ctx)
	for n, _ := db.PendingDeliveries(ctx); n > 0; n, _ = db.PendingDeliveries(ctx) {
		if ctx.Err() != nil {
			t.Fatal("deliveries still pending")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("receiver got %d requests, want 3", len(got))
	}
	ids := map[string]bool{}
	var eventID string
	for _, r := range got {
		var ev events.SandboxEvent
		if err := json.Unmarshal(r.body, &ev); err != nil {
			t.Fatal(err)
		}
		if eventID == "" {
			eventID = ev.ID
		}
		if ev.ID != eventID || ev.Type != events.Created || ev.SandboxID != "sb" {
			t.Errorf("body %s: want event %s created of sb", r.body, eventID)
		}
		if !verify("s3cret", r.body, r.header.Get("e2b-signature")) || r.header.Get("e2b-signature-version") != "v1" || r.header.Get("e2b-webhook-id") != "wh" {
			t.Errorf("headers %v do not verify", r.header)
		}
		ids[r.header.Get("e2b-delivery-id")] = true
	}
	if len(ids) != 3 {
		t.Errorf("delivery ids %v: want one per attempt", ids)
	}
	as, _ := db.ListAttempts(ctx, store.AttemptQuery{WebhookID: "wh", Asc: true})
	if len(as) != 3 || as[0].Status != "failed" || as[0].ErrorClass != "http_error" || as[0].ResponseStatus != 500 || as[2].Status != "success" {
		t.Fatalf("attempts %+v", as)
	}
	if strings.Contains(as[0].RequestHeaders, Sign("s3cret", []byte(as[0].RequestBody))) {
		t.Errorf("recorded request headers carry the signature: %s", as[0].RequestHeaders)
	}
}

// TestGivesUpAfterMaxAttempts: 4 attempts, then the delivery is done (failed).
func TestGivesUpAfterMaxAttempts(t *testing.T) {
	db := openStore(t)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := New(Config{Store: db, AllowPrivate: true, RetryInterval: 10 * time.Millisecond, Poll: 10 * time.Millisecond})
	_ = db.CreateWebhook(ctx, &store.Webhook{ID: "wh", URL: srv.URL, Events: events.Types, Enabled: true, Secret: "s"})
	_ = db.PutSandbox(ctx, &store.Sandbox{ID: "sb", State: "running"})
	go d.Run(ctx)
	for n, _ := db.PendingDeliveries(ctx); n > 0; n, _ = db.PendingDeliveries(ctx) {
		if ctx.Err() != nil {
			t.Fatal("deliveries still pending")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if c := calls.Load(); c != DefaultMaxAttempts {
		t.Fatalf("%d attempts, want %d", c, DefaultMaxAttempts)
	}
}

// TestPrivateRefused: without AllowPrivate a loopback URL is refused at
// registration, and a delivery that reaches one anyway (a name that
// resolves elsewhere later) is refused at the connection.
func TestPrivateRefused(t *testing.T) {
	db := openStore(t)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { calls.Add(1) }))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := New(Config{Store: db, RetryInterval: time.Hour, Poll: 10 * time.Millisecond})
	for _, u := range []string{srv.URL, "http://localhost:1/", "http://169.254.169.254/", "http://10.1.2.3/", "http://[::1]/", "ftp://example.com/"} {
		if err := d.CheckURL(ctx, u); err == nil {
			t.Errorf("CheckURL(%s) accepted", u)
		}
	}
	_ = db.CreateWebhook(ctx, &store.Webhook{ID: "wh", URL: srv.URL, Events: events.Types, Enabled: true, Secret: "s"})
	_ = db.PutSandbox(ctx, &store.Sandbox{ID: "sb", State: "running"})
	go d.Run(ctx)
	var as []*store.DeliveryAttempt
	for len(as) == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		as, _ = db.ListAttempts(ctx, store.AttemptQuery{WebhookID: "wh"})
	}
	if len(as) == 0 || as[0].Status != "failed" || !strings.Contains(as[0].ErrorMessage, "refusing to deliver") {
		t.Fatalf("attempts %+v, want one refused", as)
	}
	if calls.Load() != 0 {
		t.Fatal("the loopback receiver was reached")
	}
}
