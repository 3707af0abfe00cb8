package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// Lifecycle events and webhook deliveries (store.EventStore). With an
// event hook, a sandbox row change and the events it reports, with their
// pending deliveries, commit in one transaction; the old row is read FOR
// UPDATE in it. Deliveries are claimed with FOR UPDATE SKIP LOCKED and a
// lease (lease_owner, lease_until by the server's clock), so of several api
// instances one delivers a given event, and another takes it over once the
// lease of one that died has run out.

var _ store.EventStore = (*DB)(nil)

// SetEventHook installs h (store.EventStore).
func (d *DB) SetEventHook(h store.EventHook) {
	if h == nil {
		d.hook.Store(nil)
		return
	}
	d.hook.Store(&h)
}

func (d *DB) eventHook() store.EventHook {
	if p := d.hook.Load(); p != nil {
		return *p
	}
	return nil
}

// inTx runs fn in a transaction through run (lease check, reconnects).
func (d *DB) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return d.run(ctx, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, d.pool, fn)
	})
}

func (d *DB) putSandboxEvents(ctx context.Context, s *store.Sandbox, meta, envs string, h store.EventHook) error {
	err := d.inTx(ctx, func(tx pgx.Tx) error {
		old, err := scanSandbox(tx.QueryRow(ctx, "SELECT "+sandboxColumns+" FROM sandboxes WHERE id = $1 FOR UPDATE", s.ID))
		if errors.Is(err, pgx.ErrNoRows) {
			old, err = nil, nil
		}
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, putSandboxSQL, d.putSandboxArgs(s, meta, envs)...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("another node holds it: %w", store.ErrMoved)
		}
		evs, err := h(ctx, txEvents{tx}, store.Change{Old: old, New: s})
		if err != nil {
			return fmt.Errorf("events: %w", err)
		}
		return insertEvents(ctx, tx, evs)
	})
	if err != nil {
		return fmt.Errorf("put sandbox %s: %w", s.ID, err)
	}
	return nil
}

func (d *DB) deleteSandboxEvents(ctx context.Context, id string, h store.EventHook) error {
	err := d.inTx(ctx, func(tx pgx.Tx) error {
		old, err := scanSandbox(tx.QueryRow(ctx, `WITH gone AS (DELETE FROM sandboxes WHERE id = $1 AND node_id = $2 RETURNING *),
			n AS (SELECT pg_notify($3, id) FROM gone)
			SELECT `+sandboxColumns+` FROM gone, (SELECT count(*) FROM n) c`, id, d.nodeID, RoutesChannel))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("sandbox %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		evs, err := h(ctx, txEvents{tx}, store.Change{Old: old})
		if err != nil {
			return fmt.Errorf("events: %w", err)
		}
		return insertEvents(ctx, tx, evs)
	})
	if errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	return nil
}

type txEvents struct{ tx pgx.Tx }

func (t txEvents) LastEvent(ctx context.Context, sandboxID string, types ...string) (*store.Event, error) {
	q := "SELECT " + eventColumns + " FROM events WHERE sandbox_id = $1"
	args := []any{sandboxID}
	if len(types) > 0 {
		q += " AND type = ANY($2)"
		args = append(args, types)
	}
	e, err := scanEvent(t.tx.QueryRow(ctx, q+" ORDER BY ts DESC, seq DESC LIMIT 1", args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return e, err
}

const eventColumns = "id, type, ts, sandbox_id, execution_id, template_id, build_id, team_id, data"

func scanEvent(r pgx.Row) (*store.Event, error) {
	var e store.Event
	if err := r.Scan(&e.ID, &e.Type, &e.Timestamp, &e.SandboxID, &e.ExecutionID, &e.TemplateID, &e.BuildID, &e.TeamID, &e.Data); err != nil {
		return nil, err
	}
	e.Timestamp = e.Timestamp.UTC()
	return &e, nil
}

func insertEvents(ctx context.Context, tx pgx.Tx, evs []*store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	hooks, err := listWebhooksQ(ctx, tx)
	if err != nil {
		return err
	}
	for _, e := range evs {
		if _, err := tx.Exec(ctx, "INSERT INTO events ("+eventColumns+") VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)",
			e.ID, e.Type, e.Timestamp, e.SandboxID, e.ExecutionID, e.TemplateID, e.BuildID, e.TeamID, e.Data); err != nil {
			return fmt.Errorf("inserting event %s: %w", e.ID, err)
		}
		for _, w := range hooks {
			if !w.Enabled || !slices.Contains(w.Events, e.Type) {
				continue
			}
			if _, err := tx.Exec(ctx, "INSERT INTO webhook_deliveries (event_id, webhook_id) VALUES ($1,$2)", e.ID, w.ID); err != nil {
				return fmt.Errorf("queueing delivery of %s: %w", e.ID, err)
			}
		}
	}
	return nil
}

// ListEvents returns the events q selects.
func (d *DB) ListEvents(ctx context.Context, q store.EventQuery) ([]*store.Event, error) {
	order := "ts DESC, seq DESC"
	if q.Asc {
		order = "ts, seq"
	}
	return list(ctx, d, "events", "SELECT "+eventColumns+` FROM events
		WHERE ($1 = '' OR sandbox_id = $1) AND (cardinality($2::text[]) = 0 OR type = ANY($2))
		ORDER BY `+order+" LIMIT $3 OFFSET $4", scanEvent, q.SandboxID, nonNil(q.Types), q.Limit, q.Offset)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// DeleteEventsBefore removes what is older than t.
func (d *DB) DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error) {
	var n int64
	err := d.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM events WHERE ts < $1)", t); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, "DELETE FROM events WHERE ts < $1", t)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, "DELETE FROM webhook_attempts WHERE ts < $1", t)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("deleting old events: %w", err)
	}
	return n, nil
}

const webhookColumns = "id, name, url, events::text, enabled, secret, created_at"

func scanWebhook(r pgx.Row) (*store.Webhook, error) {
	var (
		w       store.Webhook
		evs     string
		created *time.Time
	)
	if err := r.Scan(&w.ID, &w.Name, &w.URL, &evs, &w.Enabled, &w.Secret, &created); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(evs), &w.Events); err != nil {
		return nil, fmt.Errorf("webhook %s events: %w", w.ID, err)
	}
	w.CreatedAt = decodeTime(created)
	return &w, nil
}

func listWebhooksQ(ctx context.Context, tx pgx.Tx) ([]*store.Webhook, error) {
	rows, err := tx.Query(ctx, "SELECT "+webhookColumns+" FROM webhooks ORDER BY created_at NULLS FIRST, id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Webhook
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

func encodeEvents(evs []string) string {
	b, _ := json.Marshal(nonNil(evs))
	return string(b)
}

// CreateWebhook inserts w.
func (d *DB) CreateWebhook(ctx context.Context, w *store.Webhook) error {
	if _, err := d.exec(ctx, "INSERT INTO webhooks (id, name, url, events, enabled, secret, created_at) VALUES ($1,$2,$3,$4,$5,$6,$7)",
		w.ID, w.Name, w.URL, encodeEvents(w.Events), w.Enabled, w.Secret, encodeTime(w.CreatedAt)); err != nil {
		return fmt.Errorf("create webhook %s: %w", w.ID, err)
	}
	return nil
}

// UpdateWebhook replaces w's fields (not its creation time).
func (d *DB) UpdateWebhook(ctx context.Context, w *store.Webhook) error {
	tag, err := d.exec(ctx, "UPDATE webhooks SET name = $2, url = $3, events = $4, enabled = $5, secret = $6 WHERE id = $1",
		w.ID, w.Name, w.URL, encodeEvents(w.Events), w.Enabled, w.Secret)
	if err != nil {
		return fmt.Errorf("update webhook %s: %w", w.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("webhook %s: %w", w.ID, store.ErrNotFound)
	}
	return nil
}

// ReplaceWebhookSecret sets id's secret when it is still old.
func (d *DB) ReplaceWebhookSecret(ctx context.Context, id, old, secret string) (bool, error) {
	tag, err := d.exec(ctx, "UPDATE webhooks SET secret = $3 WHERE id = $1 AND secret = $2", id, old, secret)
	if err != nil {
		return false, fmt.Errorf("replace webhook %s secret: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// GetWebhook returns one webhook or store.ErrNotFound.
func (d *DB) GetWebhook(ctx context.Context, id string) (*store.Webhook, error) {
	var w *store.Webhook
	err := d.queryRow(ctx, func(r pgx.Row) (err error) {
		w, err = scanWebhook(r)
		return err
	}, "SELECT "+webhookColumns+" FROM webhooks WHERE id = $1", id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("webhook %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get webhook %s: %w", id, err)
	}
	return w, nil
}

// ListWebhooks returns every webhook, oldest first.
func (d *DB) ListWebhooks(ctx context.Context) ([]*store.Webhook, error) {
	return list(ctx, d, "webhooks", "SELECT "+webhookColumns+" FROM webhooks ORDER BY created_at NULLS FIRST, id", scanWebhook)
}

// DeleteWebhook removes a webhook and its pending deliveries.
func (d *DB) DeleteWebhook(ctx context.Context, id string) error {
	found := false
	err := d.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "DELETE FROM webhooks WHERE id = $1", id)
		if err != nil {
			return err
		}
		found = tag.RowsAffected() > 0
		_, err = tx.Exec(ctx, "DELETE FROM webhook_deliveries WHERE webhook_id = $1", id)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete webhook %s: %w", id, err)
	}
	if !found {
		return fmt.Errorf("webhook %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// ClaimDeliveries leases due deliveries to owner: the rows another
// instance is claiming at the same moment are skipped (SKIP LOCKED), and a
// lease is a time by the server's clock.
func (d *DB) ClaimDeliveries(ctx context.Context, owner string, lease time.Duration, limit int) ([]*store.Delivery, error) {
	var out []*store.Delivery
	err := d.inTx(ctx, func(tx pgx.Tx) error {
		out = nil
		rows, err := tx.Query(ctx, `WITH due AS (
				SELECT event_id, webhook_id FROM webhook_deliveries
				WHERE next_at <= now() AND lease_until <= now()
				ORDER BY next_at LIMIT $3 FOR UPDATE SKIP LOCKED),
			claimed AS (
				UPDATE webhook_deliveries d SET lease_owner = $1, lease_until = now() + $2 * interval '1 millisecond'
				FROM due WHERE d.event_id = due.event_id AND d.webhook_id = due.webhook_id
				RETURNING d.event_id, d.webhook_id, d.attempts)
			SELECT c.webhook_id, c.attempts, w.url, w.secret, e.id, e.type, e.ts, e.sandbox_id, e.execution_id,
				e.template_id, e.build_id, e.team_id, e.data
			FROM claimed c JOIN events e ON e.id = c.event_id JOIN webhooks w ON w.id = c.webhook_id
			ORDER BY e.seq`, owner, lease.Milliseconds(), limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				dv store.Delivery
				e  store.Event
			)
			if err := rows.Scan(&dv.WebhookID, &dv.Attempts, &dv.URL, &dv.Secret,
				&e.ID, &e.Type, &e.Timestamp, &e.SandboxID, &e.ExecutionID, &e.TemplateID, &e.BuildID, &e.TeamID, &e.Data); err != nil {
				return err
			}
			e.Timestamp = e.Timestamp.UTC()
			dv.Event = &e
			out = append(out, &dv)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("claiming deliveries: %w", err)
	}
	return out, nil
}

// FinishDelivery records a and ends owner's lease of d.
func (d *DB) FinishDelivery(ctx context.Context, owner string, dv *store.Delivery, a *store.DeliveryAttempt, retryAt time.Time) error {
	err := d.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO webhook_attempts (id, webhook_id, event_id, sandbox_id, event_type, status,
			duration_ms, request_body, request_headers, request_url, response_body, response_headers, response_status,
			error_class, error_message, ts) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16)`,
			a.ID, a.WebhookID, a.EventID, a.SandboxID, a.EventType, a.Status, a.DurationMs, a.RequestBody, a.RequestHeaders,
			a.RequestURL, a.ResponseBody, a.ResponseHeaders, a.ResponseStatus, a.ErrorClass, a.ErrorMessage, a.Timestamp); err != nil {
			return err
		}
		var err error
		if retryAt.IsZero() {
			_, err = tx.Exec(ctx, "DELETE FROM webhook_deliveries WHERE event_id = $1 AND webhook_id = $2 AND lease_owner = $3",
				dv.Event.ID, dv.WebhookID, owner)
		} else {
			_, err = tx.Exec(ctx, `UPDATE webhook_deliveries SET attempts = attempts + 1, next_at = $4, lease_owner = '', lease_until = '-infinity'
				WHERE event_id = $1 AND webhook_id = $2 AND lease_owner = $3`, dv.Event.ID, dv.WebhookID, owner, retryAt)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("recording delivery of %s: %w", dv.Event.ID, err)
	}
	return nil
}

// ListAttempts returns the attempts q selects.
func (d *DB) ListAttempts(ctx context.Context, q store.AttemptQuery) ([]*store.DeliveryAttempt, error) {
	order := "ts DESC, id DESC"
	if q.Asc {
		order = "ts, id"
	}
	return list(ctx, d, "delivery attempts", `SELECT id, webhook_id, event_id, sandbox_id, event_type, status, duration_ms,
		request_body, request_headers, request_url, response_body, response_headers, response_status, error_class, error_message, ts
		FROM webhook_attempts WHERE webhook_id = $1
		AND ($2::timestamptz IS NULL OR ts >= $2) AND ($3::timestamptz IS NULL OR ts <= $3)
		AND (cardinality($4::text[]) = 0 OR status = ANY($4)) AND (cardinality($5::text[]) = 0 OR event_type = ANY($5))
		ORDER BY `+order, scanAttempt, q.WebhookID, encodeTime(q.Start), encodeTime(q.End), nonNil(q.Status), nonNil(q.EventTypes))
}

func scanAttempt(r pgx.Row) (*store.DeliveryAttempt, error) {
	var a store.DeliveryAttempt
	if err := r.Scan(&a.ID, &a.WebhookID, &a.EventID, &a.SandboxID, &a.EventType, &a.Status, &a.DurationMs, &a.RequestBody,
		&a.RequestHeaders, &a.RequestURL, &a.ResponseBody, &a.ResponseHeaders, &a.ResponseStatus, &a.ErrorClass, &a.ErrorMessage, &a.Timestamp); err != nil {
		return nil, err
	}
	a.Timestamp = a.Timestamp.UTC()
	return &a, nil
}

// PendingDeliveries counts deliveries not yet done.
func (d *DB) PendingDeliveries(ctx context.Context) (int, error) {
	var n int
	if err := d.queryRow(ctx, func(r pgx.Row) error { return r.Scan(&n) }, "SELECT count(*) FROM webhook_deliveries"); err != nil {
		return 0, fmt.Errorf("counting deliveries: %w", err)
	}
	return n, nil
}

// putSnapshotEvents writes s and the events of the snapshot in one
// transaction.
func (d *DB) putSnapshotEvents(ctx context.Context, s *store.Snapshot, h store.EventHook) error {
	err := d.inTx(ctx, func(tx pgx.Tx) error {
		row, err := scanSandbox(tx.QueryRow(ctx, "SELECT "+sandboxColumns+" FROM sandboxes WHERE id = $1", s.SandboxID))
		if errors.Is(err, pgx.ErrNoRows) {
			row, err = nil, nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, putSnapshotSQL, s.ID, s.Name, s.SandboxID, s.SizeBytes, encodeTime(s.CreatedAt), s.Spec, d.nodeID); err != nil {
			return err
		}
		evs, err := h(ctx, txEvents{tx}, store.Change{Old: row, New: row, Snapshot: s})
		if err != nil {
			return fmt.Errorf("events: %w", err)
		}
		return insertEvents(ctx, tx, evs)
	})
	if err != nil {
		return fmt.Errorf("put snapshot %s: %w", s.ID, err)
	}
	return nil
}

// lostEvents records, with an event hook, the events of the running
// sandboxes of nodes that ReapLostNodes is about to delete (killed: they
// are gone with their node). It runs in the reaper's transaction.
func (d *DB) lostEvents(ctx context.Context, tx pgx.Tx, nodes []string) error {
	h := d.eventHook()
	if h == nil {
		return nil
	}
	rows, err := tx.Query(ctx, "SELECT "+sandboxColumns+" FROM sandboxes WHERE node_id = ANY($1) AND state = 'running' FOR UPDATE", nodes)
	if err != nil {
		return err
	}
	lost, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Sandbox, error) { return scanSandbox(r) })
	if err != nil {
		return err
	}
	for _, old := range lost {
		evs, err := h(ctx, txEvents{tx}, store.Change{Old: old})
		if err != nil {
			return err
		}
		if err := insertEvents(ctx, tx, evs); err != nil {
			return err
		}
	}
	return nil
}
