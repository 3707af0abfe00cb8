package apirole

import (
	"context"
	"log/slog"
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
}

// runEvents delivers webhooks and deletes old events until ctx ends; the
// returned channel closes when both have stopped. Every api instance runs
// a deliverer: the store's leases (FOR UPDATE SKIP LOCKED) give each
// pending delivery to one of them, and another takes it over when the
// instance holding it dies. The nodes record the events (their store's
// event hook) and deliver nothing. The api tier links no network code, so
// its deliveries refuse private, loopback, link-local and the host's own
// addresses, not the operator's --deny-out list (the nodes' registration
// check applies that one).
func runEvents(ctx context.Context, st store.EventStore, cfg Events, log *slog.Logger) <-chan struct{} {
	keep := cfg.Retention
	if keep <= 0 {
		keep = events.DefaultRetention
	}
	d := webhooks.New(webhooks.Config{Store: st, AllowPrivate: cfg.WebhookAllowPrivate, RetryInterval: cfg.WebhookRetryInterval,
		Log: log.With("component", "webhooks")})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); d.Run(ctx) }()
	go func() { defer wg.Done(); events.Retain(ctx, st, keep, time.Hour, log.With("component", "events")) }()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}
