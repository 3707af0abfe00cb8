package api_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/secretbox"
	"github.com/airlock-sandbox/airlock/internal/store/sqlite"
	"github.com/airlock-sandbox/airlock/internal/webhooks"
)

// TestWebhookSecretSealedAtRest: the signing secret a caller registers is
// stored sealed (the column is not the secret, and opens to it for this
// webhook only); a legacy clear secret is sealed by the next update that
// does not change it; a new secret that looks sealed is sealed as any.
func TestWebhookSecretSealedAtRest(t *testing.T) {
	t.Parallel()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	box, err := secretbox.New(make([]byte, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	secrets := &webhooks.Secrets{Box: box}
	h := newHarness(t, api.Options{Events: &api.Events{Store: db, TeamID: "team", Secrets: secrets,
		CheckURL: func(context.Context, string) error { return nil }}})
	ctx := context.Background()

	status, _, body := h.do(t, http.MethodPost, "/events/webhooks",
		`{"name":"w","url":"https://example.com/h","events":["sandbox.lifecycle.created"],"signatureSecret":"t0p-s3cret"}`)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	if strings.Contains(string(body), "t0p-s3cret") {
		t.Fatalf("the secret is in the answer: %s", body)
	}
	id := decode[map[string]any](t, body)["id"].(string)
	stored := func() string {
		t.Helper()
		w, err := db.GetWebhook(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return w.Secret
	}
	s := stored()
	if strings.Contains(s, "t0p-s3cret") || !webhooks.Sealed(s) {
		t.Fatalf("stored secret %q: want it sealed", s)
	}
	if got, err := secrets.Open(id, s); err != nil || got != "t0p-s3cret" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if _, err := secrets.Open("another-webhook", s); err == nil {
		t.Fatal("a sealed secret opened for another webhook id")
	}

	// A legacy clear secret (a store written before sealing) is sealed by
	// an update that leaves it as it is.
	if ok, err := db.ReplaceWebhookSecret(ctx, id, s, "legacy-clear"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if status, _, body := h.do(t, http.MethodPatch, "/events/webhooks/"+id, `{"name":"renamed"}`); status != http.StatusOK {
		t.Fatalf("update: %d %s", status, body)
	}
	if s = stored(); !webhooks.Sealed(s) {
		t.Fatalf("stored secret %q after an update: want it sealed", s)
	}
	if got, err := secrets.Open(id, s); err != nil || got != "legacy-clear" {
		t.Fatalf("Open = %q, %v; want the legacy secret", got, err)
	}

	// A new secret that looks like a sealed value is still the caller's.
	if status, _, body := h.do(t, http.MethodPatch, "/events/webhooks/"+id, `{"signatureSecret":"sealed:v1:AAAA"}`); status != http.StatusOK {
		t.Fatalf("update: %d %s", status, body)
	}
	if got, err := secrets.Open(id, stored()); err != nil || got != "sealed:v1:AAAA" {
		t.Fatalf("Open = %q, %v", got, err)
	}
}
