package apirole

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/webhooks"
)

// Events configures the api tier's webhook deliveries and event retention.
type Events struct {
	Retention            time.Duration // --events-retention (0: events.DefaultRetention)
	WebhookAllowPrivate  bool          // --webhook-allow-private
	WebhookRetryInterval time.Duration // --webhook-retry-interval (0: the default)
	// DenyOut and DenyOutExcept are the parsed --deny-out and
	// --deny-out-except (internal/daemon resolves the default list): the
	// api tier links no network code, so they come as plain prefixes.
	DenyOut, DenyOutExcept []netip.Prefix
	// Secrets opens the webhook signing secrets the nodes sealed
	// (--secrets-key-file: the same key on every daemon of the cluster).
	Secrets *webhooks.Secrets
}

// deliveryConfig is the api tier's webhooks.Config.
func deliveryConfig(st store.EventStore, cfg Events, log *slog.Logger) webhooks.Config {
	return webhooks.Config{Store: st, AllowPrivate: cfg.WebhookAllowPrivate, RetryInterval: cfg.WebhookRetryInterval,
		DenyOut: cfg.DenyOut, DenyOutExcept: cfg.DenyOutExcept, Secrets: cfg.Secrets, Log: log.With("component", "webhooks")}
}

// runEvents delivers webhooks and deletes old events until ctx ends; the
// returned channel closes when both have stopped. Every api instance runs
// a deliverer: the store's leases (FOR UPDATE SKIP LOCKED) give each
// pending delivery to one of them, and another takes it over when the
// instance holding it dies. The nodes record the events (their store's
// event hook) and deliver nothing. The api tier links no network code:
// its deliveries refuse loopback, link-local and the host's own addresses,
// private IPv6, and the operator's --deny-out list less --deny-out-except
// (given as prefixes), as the nodes' registration check does.
func runEvents(ctx context.Context, st store.EventStore, cfg Events, log *slog.Logger) <-chan struct{} {
	keep := cfg.Retention
	if keep <= 0 {
		keep = events.DefaultRetention
	}
	if cfg.Secrets != nil {
		if n, err := cfg.Secrets.SealLegacy(ctx, st); err != nil {
			log.Warn("sealing webhook secrets stored in the clear", "err", err)
		} else if n > 0 {
			log.Info("sealed webhook secrets stored in the clear", "webhooks", n)
		}
	}
	d := webhooks.New(deliveryConfig(st, cfg, log))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); d.Run(ctx) }()
	go func() { defer wg.Done(); events.Retain(ctx, st, keep, time.Hour, log.With("component", "events")) }()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}
