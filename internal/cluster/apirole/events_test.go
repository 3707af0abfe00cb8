package apirole

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/webhooks"
)

// TestDeliveryConfigAppliesDenyOut: the api tier's deliverer refuses the
// operator's --deny-out list (less --deny-out-except), handed over as
// prefixes, and opens secrets with the given key.
func TestDeliveryConfigAppliesDenyOut(t *testing.T) {
	secrets := &webhooks.Secrets{}
	cfg := deliveryConfig(nil, Events{
		DenyOut:       []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		DenyOutExcept: []netip.Prefix{netip.MustParsePrefix("198.51.100.7/32")},
		Secrets:       secrets,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if cfg.Secrets != secrets {
		t.Error("the secrets key is not passed to the deliverer")
	}
	d := webhooks.New(cfg)
	if err := d.CheckURL(context.Background(), "http://198.51.100.1/"); err == nil {
		t.Error("a webhook URL in --deny-out was accepted")
	}
	if err := d.CheckURL(context.Background(), "http://198.51.100.7/"); err != nil {
		t.Errorf("a webhook URL in --deny-out-except was refused: %v", err)
	}
}
