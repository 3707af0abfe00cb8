package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/webhooks"
)

// Events are the --events-* and --webhook-* flags (internal/events,
// internal/webhooks).
type Events struct {
	// Retention is --events-retention: how long events and delivery
	// attempts are kept (default 7 days).
	Retention time.Duration
	// WebhookAllowPrivate is --webhook-allow-private: webhook URLs may
	// point at private, loopback and link-local addresses.
	WebhookAllowPrivate bool
	// WebhookRetryInterval is --webhook-retry-interval: the wait between
	// attempts of a failed delivery (default 10 s, as E2B's).
	WebhookRetryInterval time.Duration
}

// retainEvery is how often old events are deleted.
const retainEvery = time.Hour

// openEvents installs the event hook on the store, so that every sandbox
// change from here on (the restore included) records its events, and
// prepares the deliverer and the API. It runs before the manager exists.
func (d *daemon) openEvents(ctx context.Context, st store.Full) error {
	team, err := events.TeamID(ctx, st)
	if err != nil {
		return err
	}
	if d.cfg.Events.Retention < 0 {
		return fmt.Errorf("invalid --events-retention %s: want a positive duration", d.cfg.Events.Retention)
	}
	// Webhook signing secrets are sealed at rest with the secrets key;
	// those a daemon older than that stored in the clear are sealed now.
	box, err := d.openSecrets()
	if err != nil {
		return err
	}
	secrets := &webhooks.Secrets{Box: box}
	if n, err := secrets.SealLegacy(ctx, st); err != nil {
		return err
	} else if n > 0 {
		d.log.Info("sealed webhook secrets stored in the clear", "webhooks", n)
	}
	nc := network.Config{Subnet: d.subnet, DenyOut: d.denyOut, DenyOutExcept: d.denyOutExcept}
	d.deliverer = webhooks.New(webhooks.Config{Store: st, Denies: nc.Denies, AllowPrivate: d.cfg.Events.WebhookAllowPrivate,
		Secrets: secrets, RetryInterval: d.cfg.Events.WebhookRetryInterval, Log: d.log.With("component", "webhooks")})
	// The hook runs inside the transaction: the deliverer looks a moment
	// later, once it committed (and polls every second anyway).
	rec := &events.Recorder{TeamID: team, Recorded: func() { time.AfterFunc(20*time.Millisecond, d.deliverer.Wake) }}
	st.SetEventHook(rec.Hook)
	d.events = &api.Events{Store: st, TeamID: team, CheckURL: d.deliverer.CheckURL, Secrets: secrets}
	return nil
}

// runEvents delivers webhooks and deletes old events until ctx ends. A
// cluster node does neither: the api tier does (internal/cluster/apirole).
func (d *daemon) runEvents(ctx context.Context) {
	if d.role.node {
		return
	}
	keep := d.cfg.Events.Retention
	if keep == 0 {
		keep = events.DefaultRetention
	}
	go d.deliverer.Run(ctx)
	go events.Retain(ctx, d.st, keep, retainEvery, d.log.With("component", "events"))
}
