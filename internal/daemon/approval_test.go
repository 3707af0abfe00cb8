package daemon

import (
	"io"
	"log/slog"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/approval"
	"github.com/airlock-sandbox/airlock/internal/secretbox"
	"github.com/airlock-sandbox/airlock/internal/webhooks"
)

// TestOpenHook: a sealed approval webhook secret opens for its own URL
// only; a clear one (a record from before sealing) is used as it is.
func TestOpenHook(t *testing.T) {
	box, err := secretbox.New(make([]byte, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	secrets := &webhooks.Secrets{Box: box}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const url = "https://hooks.example.com/a"
	sealed, err := secrets.Seal(approval.SecretKey(url), "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	hook := func(u, s string) *approval.Config {
		return &approval.Config{Webhook: &approval.Webhook{URL: u, Secret: s}}
	}
	if got := openHook(secrets, hook(url, sealed), log); got.Webhook.Secret != "s3cret" {
		t.Fatalf("sealed secret opened to %q", got.Webhook.Secret)
	}
	if got := openHook(secrets, hook(url, "legacy"), log); got.Webhook.Secret != "legacy" {
		t.Fatalf("clear secret = %q", got.Webhook.Secret)
	}
	if got := openHook(secrets, hook("https://evil.example.com/", sealed), log); got.Webhook.Secret != "" {
		t.Fatalf("a sealed secret moved to another URL opened to %q; want it unsigned", got.Webhook.Secret)
	}
	if got := openHook(secrets, nil, log); got != nil {
		t.Fatal("nil hook")
	}
}
