package webhooks

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/secretbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

func testBox(t *testing.T, b byte) *secretbox.Box {
	t.Helper()
	key := make([]byte, secretbox.KeySize)
	key[0] = b
	box, err := secretbox.New(key)
	if err != nil {
		t.Fatal(err)
	}
	return box
}

// waitDelivered waits until no delivery is pending.
func waitDelivered(ctx context.Context, t *testing.T, st store.EventStore) {
	t.Helper()
	for n, _ := st.PendingDeliveries(ctx); n > 0; n, _ = st.PendingDeliveries(ctx) {
		if ctx.Err() != nil {
			t.Fatal("deliveries still pending")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLegacyClearSecretSignsThenIsSealed: a webhook whose secret a daemon
// older than sealing stored in the clear still gets signed deliveries;
// SealLegacy (run at start) seals it, and deliveries then sign with the
// same secret. Sealing twice changes nothing.
func TestLegacyClearSecretSignsThenIsSealed(t *testing.T) {
	db := openStore(t)
	var mu sync.Mutex
	var got []received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, received{r.Header.Clone(), b})
		mu.Unlock()
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	secrets := &Secrets{Box: testBox(t, 1)}
	d := New(Config{Store: db, AllowPrivate: true, Secrets: secrets, Poll: 10 * time.Millisecond})
	go d.Run(ctx)
	if err := db.CreateWebhook(ctx, &store.Webhook{ID: "wh", URL: srv.URL, Events: []string{events.Created}, Enabled: true, Secret: "legacy"}); err != nil {
		t.Fatal(err)
	}
	_ = db.PutSandbox(ctx, &store.Sandbox{ID: "sb1", State: "running", StartedAt: time.Now()})
	waitDelivered(ctx, t, db)

	if n, err := secrets.SealLegacy(ctx, db); n != 1 || err != nil {
		t.Fatalf("SealLegacy = %d, %v; want 1", n, err)
	}
	w, _ := db.GetWebhook(ctx, "wh")
	if !Sealed(w.Secret) || strings.Contains(w.Secret, "legacy") {
		t.Fatalf("stored secret %q: want it sealed", w.Secret)
	}
	if n, err := secrets.SealLegacy(ctx, db); n != 0 || err != nil {
		t.Fatalf("SealLegacy again = %d, %v; want 0", n, err)
	}
	if w2, _ := db.GetWebhook(ctx, "wh"); w2.Secret != w.Secret {
		t.Fatal("a second SealLegacy changed a sealed secret")
	}
	_ = db.PutSandbox(ctx, &store.Sandbox{ID: "sb2", State: "running", StartedAt: time.Now()})
	waitDelivered(ctx, t, db)

	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(got))
	}
	for i, r := range got {
		if !verify("legacy", r.body, r.header.Get("e2b-signature")) {
			t.Errorf("delivery %d: signature does not verify with the legacy secret", i)
		}
	}
}

// TestSealedSecretWrongKey: a secret sealed under another key (an api
// instance with a different --secrets-key-file) is never sent unsigned or
// signed wrong: the attempt fails without reaching the receiver.
func TestSealedSecretWrongKey(t *testing.T) {
	db := openStore(t)
	calls := make(chan struct{}, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls <- struct{}{} }))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sealed, err := (&Secrets{Box: testBox(t, 1)}).Seal("wh", "s")
	if err != nil {
		t.Fatal(err)
	}
	d := New(Config{Store: db, AllowPrivate: true, Secrets: &Secrets{Box: testBox(t, 2)}, MaxAttempts: 1, Poll: 10 * time.Millisecond})
	go d.Run(ctx)
	_ = db.CreateWebhook(ctx, &store.Webhook{ID: "wh", URL: srv.URL, Events: []string{events.Created}, Enabled: true, Secret: sealed})
	_ = db.PutSandbox(ctx, &store.Sandbox{ID: "sb", State: "running", StartedAt: time.Now()})
	waitDelivered(ctx, t, db)
	as, _ := db.ListAttempts(ctx, store.AttemptQuery{WebhookID: "wh"})
	if len(as) != 1 || as[0].Status != "failed" || !strings.Contains(as[0].ErrorMessage, "--secrets-key-file") {
		t.Fatalf("attempts %+v, want one failed naming --secrets-key-file", as)
	}
	if len(calls) != 0 {
		t.Fatal("the receiver was reached without the right secret")
	}
}

// TestDenyOutWithoutNetworkCode is the api tier's deliverer: no Denies
// function, the operator's --deny-out list as prefixes. A public address
// in it is refused at registration and at the connection, one in a
// --deny-out-except entry is not, and a private IPv4 address outside the
// list is allowed as on the nodes.
func TestDenyOutWithoutNetworkCode(t *testing.T) {
	ctx := context.Background()
	d := New(Config{Store: openStore(t),
		DenyOut:       []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("203.0.113.0/24")},
		DenyOutExcept: []netip.Prefix{netip.MustParsePrefix("203.0.113.128/25")}})
	for _, u := range []string{"http://203.0.113.5/", "http://10.1.2.3/", "http://127.0.0.1/", "http://[fd00::1]/"} {
		if err := d.CheckURL(ctx, u); err == nil {
			t.Errorf("CheckURL(%s) accepted", u)
		}
	}
	for _, u := range []string{"http://203.0.113.200/", "http://192.168.1.1/", "http://198.51.100.7/"} {
		if err := d.CheckURL(ctx, u); err != nil {
			t.Errorf("CheckURL(%s) = %v, want accepted", u, err)
		}
	}
	if err := d.control("tcp4", "203.0.113.5:443", nil); err == nil || !strings.Contains(err.Error(), "203.0.113.0/24") {
		t.Errorf("dial to a denied address: %v, want refused naming its range", err)
	}
	if err := d.control("tcp4", "203.0.113.130:443", nil); err != nil {
		t.Errorf("dial to an excepted address: %v", err)
	}

	// Without a list every private address is refused (as before).
	d = New(Config{Store: openStore(t)})
	if err := d.CheckURL(ctx, "http://192.168.1.1/"); err == nil {
		t.Error("CheckURL(192.168.1.1) accepted without a deny list")
	}
}
