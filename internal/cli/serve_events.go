//go:build linux

package cli

import (
	"github.com/spf13/pflag"

	"github.com/airlock-sandbox/airlock/internal/daemon"
	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/webhooks"
)

func addEventFlags(f *pflag.FlagSet, e *daemon.Events) {
	f.DurationVar(&e.Retention, "events-retention", events.DefaultRetention,
		"how long sandbox lifecycle events (GET /events/sandboxes) and webhook delivery attempts are kept")
	f.BoolVar(&e.WebhookAllowPrivate, "webhook-allow-private", false,
		"let webhook URLs point at private, loopback and link-local addresses and the --deny-out ranges (by default a webhook may not reach the operator's network)")
	f.DurationVar(&e.WebhookRetryInterval, "webhook-retry-interval", webhooks.DefaultRetryInterval,
		"wait between the attempts of a failed webhook delivery (4 attempts in all)")
}
