package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// Lifecycle events and webhook deliveries (store.EventStore). With an
// event hook, a sandbox row change and the events it reports, with their
// pending deliveries, commit in one transaction (_txlock=immediate: the
// write lock is taken at BEGIN, so the old row read in it is current).

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

// inTx runs fn in a write transaction.
func (d *DB) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func getSandboxTx(ctx context.Context, db execer, id string) (*store.Sandbox, error) {
	s, err := scanSandbox(db.QueryRowContext(ctx, "SELECT "+sandboxColumns+" FROM sandboxes WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return s, err
}

func (d *DB) putSandboxEvents(ctx context.Context, s *store.Sandbox, h store.EventHook) error {
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		old, err := getSandboxTx(ctx, tx, s.ID)
		if err != nil {
			return err
		}
		if err := putSandbox(ctx, tx, s); err != nil {
			return err
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

// deleteSandboxesEvents deletes the rows of ids and records their events;
// it returns how many rows there were.
func (d *DB) deleteSandboxesEvents(ctx context.Context, ids []string, h store.EventHook) (int, error) {
	n := 0
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		n = 0
		for _, id := range ids {
			old, err := getSandboxTx(ctx, tx, id)
			if err != nil {
				return err
			}
			if old == nil {
				continue
			}
			if _, err := tx.ExecContext(ctx, "DELETE FROM sandboxes WHERE id = ?", id); err != nil {
				return err
			}
			n++
			evs, err := h(ctx, txEvents{tx}, store.Change{Old: old})
			if err != nil {
				return fmt.Errorf("events: %w", err)
			}
			if err := insertEvents(ctx, tx, evs); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("delete %d sandboxes: %w", len(ids), err)
	}
	return n, nil
}

type txEvents struct{ db execer }

func (t txEvents) LastEvent(ctx context.Context, sandboxID string, types ...string) (*store.Event, error) {
	q := "SELECT " + eventColumns + " FROM events WHERE sandbox_id = ?"
	args := []any{sandboxID}
	if len(types) > 0 {
		q += " AND type IN (?" + strings.Repeat(",?", len(types)-1) + ")"
		for _, ty := range types {
			args = append(args, ty)
		}
	}
	e, err := scanEvent(t.db.QueryRowContext(ctx, q+" ORDER BY ts DESC, seq DESC LIMIT 1", args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return e, err
}

const eventColumns = "id, type, ts, sandbox_id, execution_id, template_id, build_id, team_id, data"

func scanEvent(r scanner) (*store.Event, error) {
	var (
		e  store.Event
		ts int64
	)
	if err := r.Scan(&e.ID, &e.Type, &ts, &e.SandboxID, &e.ExecutionID, &e.TemplateID, &e.BuildID, &e.TeamID, &e.Data); err != nil {
		return nil, err
	}
	e.Timestamp = decodeTime(ts)
	return &e, nil
}

// insertEvents inserts evs and a pending delivery of each to every enabled
// webhook that subscribes to its type.
func insertEvents(ctx context.Context, tx execer, evs []*store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	hooks, err := listWebhooks(ctx, tx)
	if err != nil {
		return err
	}
	now := time.Now().UnixNano()
	for _, e := range evs {
		if _, err := tx.ExecContext(ctx, "INSERT INTO events ("+eventColumns+") VALUES (?,?,?,?,?,?,?,?,?)",
			e.ID, e.Type, encodeTime(e.Timestamp), e.SandboxID, e.ExecutionID, e.TemplateID, e.BuildID, e.TeamID, e.Data); err != nil {
			return fmt.Errorf("inserting event %s: %w", e.ID, err)
		}
		for _, w := range hooks {
			if !w.Enabled || !slices.Contains(w.Events, e.Type) {
				continue
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO webhook_deliveries (event_id, webhook_id, next_at) VALUES (?,?,?)",
				e.ID, w.ID, now); err != nil {
				return fmt.Errorf("queueing delivery of %s: %w", e.ID, err)
			}
		}
	}
	return nil
}

// ListEvents returns the events q selects, by time (then insertion).
func (d *DB) ListEvents(ctx context.Context, q store.EventQuery) ([]*store.Event, error) {
	query := "SELECT " + eventColumns + " FROM events WHERE 1=1"
	var args []any
	if q.SandboxID != "" {
		query += " AND sandbox_id = ?"
		args = append(args, q.SandboxID)
	}
	if len(q.Types) > 0 {
		query += " AND type IN (?" + strings.Repeat(",?", len(q.Types)-1) + ")"
		for _, t := range q.Types {
			args = append(args, t)
		}
	}
	if q.Asc {
		query += " ORDER BY ts, seq"
	} else {
		query += " ORDER BY ts DESC, seq DESC"
	}
	query += " LIMIT ? OFFSET ?"
	args = append(args, q.Limit, q.Offset)
	rows, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	var out []*store.Event
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// DeleteEventsBefore removes what is older than t.
func (d *DB) DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error) {
	var n int64
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		cut := encodeTime(t)
		if _, err := tx.ExecContext(ctx, "DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM events WHERE ts < ?)", cut); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, "DELETE FROM events WHERE ts < ?", cut)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		_, err = tx.ExecContext(ctx, "DELETE FROM webhook_attempts WHERE ts < ?", cut)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("deleting old events: %w", err)
	}
	return n, nil
}

const webhookColumns = "id, name, url, events, enabled, secret, created_at"

func scanWebhook(r scanner) (*store.Webhook, error) {
	var (
		w       store.Webhook
		evs     string
		created int64
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

func listWebhooks(ctx context.Context, db execer) ([]*store.Webhook, error) {
	rows, err := db.QueryContext(ctx, "SELECT "+webhookColumns+" FROM webhooks ORDER BY created_at, id")
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	defer rows.Close()
	var out []*store.Webhook
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			return nil, fmt.Errorf("list webhooks: %w", err)
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

func encodeEvents(evs []string) string {
	if evs == nil {
		evs = []string{}
	}
	b, _ := json.Marshal(evs)
	return string(b)
}

// CreateWebhook inserts w.
func (d *DB) CreateWebhook(ctx context.Context, w *store.Webhook) error {
	_, err := d.db.ExecContext(ctx, "INSERT INTO webhooks ("+webhookColumns+") VALUES (?,?,?,?,?,?,?)",
		w.ID, w.Name, w.URL, encodeEvents(w.Events), w.Enabled, w.Secret, encodeTime(w.CreatedAt))
	if err != nil {
		return fmt.Errorf("create webhook %s: %w", w.ID, err)
	}
	return nil
}

// UpdateWebhook replaces w's fields (not its creation time).
func (d *DB) UpdateWebhook(ctx context.Context, w *store.Webhook) error {
	res, err := d.db.ExecContext(ctx, "UPDATE webhooks SET name = ?, url = ?, events = ?, enabled = ?, secret = ? WHERE id = ?",
		w.Name, w.URL, encodeEvents(w.Events), w.Enabled, w.Secret, w.ID)
	if err != nil {
		return fmt.Errorf("update webhook %s: %w", w.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("webhook %s: %w", w.ID, store.ErrNotFound)
	}
	return nil
}

// ReplaceWebhookSecret sets id's secret when it is still old.
func (d *DB) ReplaceWebhookSecret(ctx context.Context, id, old, secret string) (bool, error) {
	res, err := d.db.ExecContext(ctx, "UPDATE webhooks SET secret = ? WHERE id = ? AND secret = ?", secret, id, old)
	if err != nil {
		return false, fmt.Errorf("replace webhook %s secret: %w", id, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// GetWebhook returns one webhook or store.ErrNotFound.
func (d *DB) GetWebhook(ctx context.Context, id string) (*store.Webhook, error) {
	w, err := scanWebhook(d.db.QueryRowContext(ctx, "SELECT "+webhookColumns+" FROM webhooks WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("webhook %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get webhook %s: %w", id, err)
	}
	return w, nil
}

// ListWebhooks returns every webhook, oldest first.
func (d *DB) ListWebhooks(ctx context.Context) ([]*store.Webhook, error) {
	return listWebhooks(ctx, d.db)
}

// DeleteWebhook removes a webhook and its pending deliveries.
func (d *DB) DeleteWebhook(ctx context.Context, id string) error {
	found := false
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "DELETE FROM webhooks WHERE id = ?", id)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		found = n > 0
		_, err = tx.ExecContext(ctx, "DELETE FROM webhook_deliveries WHERE webhook_id = ?", id)
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

// ClaimDeliveries leases due deliveries to owner. SQLite has one writer:
// the immediate transaction is the lock that keeps two claims apart.
func (d *DB) ClaimDeliveries(ctx context.Context, owner string, lease time.Duration, limit int) ([]*store.Delivery, error) {
	var out []*store.Delivery
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		out = nil
		now := time.Now()
		rows, err := tx.QueryContext(ctx, `SELECT d.webhook_id, d.attempts, w.url, w.secret, `+prefixed("e.", eventColumns)+`
			FROM webhook_deliveries d JOIN events e ON e.id = d.event_id JOIN webhooks w ON w.id = d.webhook_id
			WHERE d.next_at <= ? AND d.lease_until <= ?
			ORDER BY d.next_at, e.seq LIMIT ?`, now.UnixNano(), now.UnixNano(), limit)
		if err != nil {
			return err
		}
		for rows.Next() {
			var (
				dv store.Delivery
				e  store.Event
				ts int64
			)
			if err := rows.Scan(&dv.WebhookID, &dv.Attempts, &dv.URL, &dv.Secret,
				&e.ID, &e.Type, &ts, &e.SandboxID, &e.ExecutionID, &e.TemplateID, &e.BuildID, &e.TeamID, &e.Data); err != nil {
				rows.Close()
				return err
			}
			e.Timestamp = decodeTime(ts)
			dv.Event = &e
			out = append(out, &dv)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		until := now.Add(lease).UnixNano()
		for _, dv := range out {
			if _, err := tx.ExecContext(ctx, "UPDATE webhook_deliveries SET lease_owner = ?, lease_until = ? WHERE event_id = ? AND webhook_id = ?",
				owner, until, dv.Event.ID, dv.WebhookID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claiming deliveries: %w", err)
	}
	return out, nil
}

func prefixed(p, cols string) string {
	fs := strings.Split(cols, ", ")
	for i := range fs {
		fs[i] = p + fs[i]
	}
	return strings.Join(fs, ", ")
}

// FinishDelivery records a and ends owner's lease of d.
func (d *DB) FinishDelivery(ctx context.Context, owner string, dv *store.Delivery, a *store.DeliveryAttempt, retryAt time.Time) error {
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO webhook_attempts (id, webhook_id, event_id, sandbox_id, event_type, status,
			duration_ms, request_body, request_headers, request_url, response_body, response_headers, response_status,
			error_class, error_message, ts) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
			a.ID, a.WebhookID, a.EventID, a.SandboxID, a.EventType, a.Status, a.DurationMs, a.RequestBody, a.RequestHeaders,
			a.RequestURL, a.ResponseBody, a.ResponseHeaders, a.ResponseStatus, a.ErrorClass, a.ErrorMessage, encodeTime(a.Timestamp)); err != nil {
			return err
		}
		var err error
		if retryAt.IsZero() {
			_, err = tx.ExecContext(ctx, "DELETE FROM webhook_deliveries WHERE event_id = ? AND webhook_id = ? AND lease_owner = ?",
				dv.Event.ID, dv.WebhookID, owner)
		} else {
			_, err = tx.ExecContext(ctx, `UPDATE webhook_deliveries SET attempts = attempts + 1, next_at = ?, lease_owner = '', lease_until = 0
				WHERE event_id = ? AND webhook_id = ? AND lease_owner = ?`, retryAt.UnixNano(), dv.Event.ID, dv.WebhookID, owner)
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
	query := `SELECT id, webhook_id, event_id, sandbox_id, event_type, status, duration_ms, request_body, request_headers,
		request_url, response_body, response_headers, response_status, error_class, error_message, ts
		FROM webhook_attempts WHERE webhook_id = ?`
	args := []any{q.WebhookID}
	if !q.Start.IsZero() {
		query += " AND ts >= ?"
		args = append(args, q.Start.UnixNano())
	}
	if !q.End.IsZero() {
		query += " AND ts <= ?"
		args = append(args, q.End.UnixNano())
	}
	for _, f := range []struct {
		col string
		vs  []string
	}{{"status", q.Status}, {"event_type", q.EventTypes}} {
		if len(f.vs) > 0 {
			query += " AND " + f.col + " IN (?" + strings.Repeat(",?", len(f.vs)-1) + ")"
			for _, v := range f.vs {
				args = append(args, v)
			}
		}
	}
	if q.Asc {
		query += " ORDER BY ts, id"
	} else {
		query += " ORDER BY ts DESC, id DESC"
	}
	rows, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list delivery attempts: %w", err)
	}
	defer rows.Close()
	var out []*store.DeliveryAttempt
	for rows.Next() {
		var (
			a  store.DeliveryAttempt
			ts int64
		)
		if err := rows.Scan(&a.ID, &a.WebhookID, &a.EventID, &a.SandboxID, &a.EventType, &a.Status, &a.DurationMs, &a.RequestBody,
			&a.RequestHeaders, &a.RequestURL, &a.ResponseBody, &a.ResponseHeaders, &a.ResponseStatus, &a.ErrorClass, &a.ErrorMessage, &ts); err != nil {
			return nil, fmt.Errorf("list delivery attempts: %w", err)
		}
		a.Timestamp = decodeTime(ts)
		out = append(out, &a)
	}
	return out, rows.Err()
}

// PendingDeliveries counts deliveries not yet done.
func (d *DB) PendingDeliveries(ctx context.Context) (int, error) {
	var n int
	if err := d.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM webhook_deliveries").Scan(&n); err != nil {
		return 0, fmt.Errorf("counting deliveries: %w", err)
	}
	return n, nil
}

// putSnapshotEvents writes s and the events of the snapshot in one
// transaction.
func (d *DB) putSnapshotEvents(ctx context.Context, s *store.Snapshot, h store.EventHook) error {
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		row, err := getSandboxTx(ctx, tx, s.SandboxID)
		if err != nil {
			return err
		}
		if err := putSnapshot(ctx, tx, s); err != nil {
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
