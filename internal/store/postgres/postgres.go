// Package postgres implements store.Full on PostgreSQL with pgx (a pgxpool
// pool), for hosts that share one database. Its schema is evolved by an
// ordered list of migrations recorded in schema_migrations and applied at
// Open under an advisory lock, so daemons starting together migrate once.
// Besides the store it offers LISTEN/NOTIFY (notify.go), the daemon lease
// that keeps a second daemon of the same node off the database (lease.go)
// and cluster.Store, the cluster's own rows (cluster.go).
//
// A DB is scoped to one node (Options.NodeID; "" is --role all): its
// sandboxes, snapshots and template builds are that node's rows only, so
// the nodes of a cluster share one database without restoring or removing
// each other's sandboxes. Templates and settings are shared by all nodes.
//
// Lost connections are replaced by the pool: after the server restarts,
// the next operations reconnect (a call in flight when it went away fails).
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// DB is a store.Full on one PostgreSQL database. It is safe for concurrent
// use.
type DB struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	// where names the database for messages: host, port, database and user,
	// never the password.
	where string

	// done is closed by Close; listeners (Listen) stop on it.
	done chan struct{}
	// mu guards closed, and orders listeners.Add before Close's Wait.
	mu        sync.Mutex
	closed    bool
	listeners sync.WaitGroup

	// lease is the daemon lease once AcquireLease took it (lease.go).
	lease atomic.Pointer[Lease]

	// nodeID scopes the sandbox, snapshot and build rows (Options.NodeID).
	nodeID string

	// hook records lifecycle events with sandbox changes (events.go).
	hook atomic.Pointer[store.EventHook]
}

// Options are a DB's settings beyond the connection string.
type Options struct {
	// NodeID is the node whose sandboxes, snapshots and template builds
	// the DB reads and writes: its --node-id under --role node, "" for
	// --role all (the rows of a single host, also those from before the
	// cluster schema) and for the api tier, which reads every node's rows
	// through cluster.Store instead.
	NodeID string
}

var _ store.Full = (*DB)(nil)

// Open connects to the database at connString (a postgres:// URL or a
// key=value DSN) and brings its schema up to date, as the store of node ""
// (--role all). log may be nil.
func Open(ctx context.Context, connString string, log *slog.Logger) (*DB, error) {
	return OpenWith(ctx, connString, Options{}, log)
}

// OpenWith is Open with options: the node scope.
func OpenWith(ctx context.Context, connString string, opts Options, log *slog.Logger) (*DB, error) {
	if log == nil {
		log = slog.Default()
	}
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		// pgx redacts the password in its parse errors.
		return nil, fmt.Errorf("parsing the PostgreSQL connection string: %w", err)
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "airlock"
	}
	where := fmt.Sprintf("postgres %s@%s:%d/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", where, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to %s: %w", where, err)
	}
	d := &DB{pool: pool, log: log, where: where, done: make(chan struct{}), nodeID: opts.NodeID}
	if err := d.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return d, nil
}

// Close stops the listeners, releases the daemon lease (if this DB holds
// it) and closes the pool. Calling it again is a no-op.
func (d *DB) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	d.mu.Unlock()
	d.listeners.Wait()
	if l := d.lease.Load(); l != nil {
		l.release()
	}
	d.pool.Close()
	return nil
}

// String names the database (without the password).
func (d *DB) String() string { return d.where }

// NodeID is the node the DB is scoped to ("" for --role all).
func (d *DB) NodeID() string { return d.nodeID }

const sandboxColumns = `id, template_id, template_hash, alias, state, runtime, slot, guest_ip,
	access_token, traffic_token, metadata, env_vars, allow_internet,
	cpu_count, memory_mb, disk_size_mb, started_at, end_at, on_timeout, extra`

// PutSandbox inserts or replaces a sandbox row, as this node's. A row
// another node holds is not touched: store.ErrMoved (rows move between
// nodes only through ClaimSandbox, so a node's stale copy of a sandbox
// another node resumed cannot take it back).
func (d *DB) PutSandbox(ctx context.Context, s *store.Sandbox) error {
	if s == nil || s.ID == "" {
		return errors.New("put sandbox: empty id")
	}
	meta, err := encodeMap(s.Metadata)
	if err != nil {
		return fmt.Errorf("put sandbox %s: metadata: %w", s.ID, err)
	}
	envs, err := encodeMap(s.EnvVars)
	if err != nil {
		return fmt.Errorf("put sandbox %s: env vars: %w", s.ID, err)
	}
	if h := d.eventHook(); h != nil {
		return d.putSandboxEvents(ctx, s, meta, envs, h)
	}
	tag, err := d.exec(ctx, putSandboxSQL, d.putSandboxArgs(s, meta, envs)...)
	if err != nil {
		return fmt.Errorf("put sandbox %s: %w", s.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("put sandbox %s: another node holds it: %w", s.ID, store.ErrMoved)
	}
	return nil
}

func (d *DB) putSandboxArgs(s *store.Sandbox, meta, envs string) []any {
	return []any{s.ID, s.TemplateID, s.TemplateHash, s.Alias, s.State, s.Runtime, s.Slot, s.GuestIP,
		s.AccessToken, s.TrafficToken, meta, envs, s.AllowInternet,
		s.CPUCount, s.MemoryMB, s.DiskSizeMB, encodeTime(s.StartedAt), encodeTime(s.EndAt), s.OnTimeout, s.Extra,
		d.nodeID}
}

const putSandboxSQL = `INSERT INTO sandboxes (` + sandboxColumns + `, node_id)
	VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21)
	ON CONFLICT (id) DO UPDATE SET
		template_id=excluded.template_id, template_hash=excluded.template_hash,
		alias=excluded.alias, state=excluded.state, runtime=excluded.runtime,
		slot=excluded.slot, guest_ip=excluded.guest_ip,
		access_token=excluded.access_token, traffic_token=excluded.traffic_token,
		metadata=excluded.metadata, env_vars=excluded.env_vars,
		allow_internet=excluded.allow_internet, cpu_count=excluded.cpu_count,
		memory_mb=excluded.memory_mb, disk_size_mb=excluded.disk_size_mb,
		started_at=excluded.started_at, end_at=excluded.end_at,
		on_timeout=excluded.on_timeout, extra=excluded.extra
	WHERE sandboxes.node_id = excluded.node_id`

// scanSandboxNode is scanSandbox of a row selected with node_id last.
func scanSandboxNode(r pgx.Row, node *string) (*store.Sandbox, error) {
	return scanSandboxInto(r, node)
}

func scanSandbox(r pgx.Row) (*store.Sandbox, error) { return scanSandboxInto(r) }

// scanSandboxInto scans sandboxColumns, then more.
func scanSandboxInto(r pgx.Row, more ...any) (*store.Sandbox, error) {
	var (
		s               store.Sandbox
		meta, envs      string
		started, endsAt *time.Time
	)
	dst := append([]any{&s.ID, &s.TemplateID, &s.TemplateHash, &s.Alias, &s.State, &s.Runtime, &s.Slot, &s.GuestIP,
		&s.AccessToken, &s.TrafficToken, &meta, &envs, &s.AllowInternet,
		&s.CPUCount, &s.MemoryMB, &s.DiskSizeMB, &started, &endsAt, &s.OnTimeout, &s.Extra}, more...)
	if err := r.Scan(dst...); err != nil {
		return nil, err
	}
	return finishSandbox(&s, meta, envs, started, endsAt)
}

// finishSandbox decodes a scanned row's maps and times.
func finishSandbox(s *store.Sandbox, meta, envs string, started, endsAt *time.Time) (*store.Sandbox, error) {
	var err error
	if s.Metadata, err = decodeMap(meta); err != nil {
		return nil, fmt.Errorf("sandbox %s: metadata: %w", s.ID, err)
	}
	if s.EnvVars, err = decodeMap(envs); err != nil {
		return nil, fmt.Errorf("sandbox %s: env vars: %w", s.ID, err)
	}
	s.StartedAt, s.EndAt = decodeTime(started), decodeTime(endsAt)
	return s, nil
}

// GetSandbox returns one of this node's sandboxes or store.ErrNotFound.
func (d *DB) GetSandbox(ctx context.Context, id string) (*store.Sandbox, error) {
	var s *store.Sandbox
	err := d.queryRow(ctx, func(r pgx.Row) (err error) {
		s, err = scanSandbox(r)
		return err
	}, "SELECT "+sandboxColumns+" FROM sandboxes WHERE id = $1 AND node_id = $2", id, d.nodeID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("sandbox %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return s, nil
}

// ListSandboxes returns this node's sandboxes ordered by start time
// (unstarted ones first, as the zero time sorts first in SQLite).
func (d *DB) ListSandboxes(ctx context.Context) ([]*store.Sandbox, error) {
	return list(ctx, d, "sandboxes", "SELECT "+sandboxColumns+
		" FROM sandboxes WHERE node_id = $1 ORDER BY started_at NULLS FIRST, id", scanSandbox, d.nodeID)
}

// DeleteSandbox removes one of this node's sandboxes; store.ErrNotFound if
// it did not exist. The same statement announces it on RoutesChannel, so
// a route cache never outlives the row by more than the notification's
// trip (and nothing is sent when no row went).
func (d *DB) DeleteSandbox(ctx context.Context, id string) error {
	if h := d.eventHook(); h != nil {
		return d.deleteSandboxEvents(ctx, id, h)
	}
	return d.deleteRow(ctx, `WITH gone AS (DELETE FROM sandboxes WHERE id = $1 AND node_id = $2 RETURNING id)
		SELECT pg_notify($3, id) FROM gone`, "sandbox", id, d.nodeID, RoutesChannel)
}

const templateColumns = "name, hash, runtime, size_bytes, created_at, spec, artifact_digest"

// PutTemplate inserts or replaces a template row (keyed by name, which
// includes the tag of a tagged template: "name:tag").
func (d *DB) PutTemplate(ctx context.Context, t *store.Template) error {
	if t == nil || t.Name == "" {
		return errors.New("put template: empty name")
	}
	_, err := d.exec(ctx, `INSERT INTO templates (`+templateColumns+`) VALUES ($1,$2,$3,$4,$5,$6,$7)
		ON CONFLICT (name) DO UPDATE SET hash=excluded.hash, runtime=excluded.runtime,
		size_bytes=excluded.size_bytes, created_at=excluded.created_at, spec=excluded.spec,
		artifact_digest=excluded.artifact_digest`,
		t.Name, t.Hash, t.Runtime, t.SizeBytes, encodeTime(t.CreatedAt), t.Spec, t.ArtifactDigest)
	if err != nil {
		return fmt.Errorf("put template %s: %w", t.Name, err)
	}
	return nil
}

func scanTemplate(r pgx.Row) (*store.Template, error) {
	var (
		t       store.Template
		created *time.Time
	)
	if err := r.Scan(&t.Name, &t.Hash, &t.Runtime, &t.SizeBytes, &created, &t.Spec, &t.ArtifactDigest); err != nil {
		return nil, err
	}
	t.CreatedAt = decodeTime(created)
	return &t, nil
}

// GetTemplate returns one template or store.ErrNotFound.
func (d *DB) GetTemplate(ctx context.Context, name string) (*store.Template, error) {
	var t *store.Template
	err := d.queryRow(ctx, func(r pgx.Row) (err error) {
		t, err = scanTemplate(r)
		return err
	}, "SELECT "+templateColumns+" FROM templates WHERE name = $1", name)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("template %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get template %s: %w", name, err)
	}
	return t, nil
}

// ListTemplates returns all templates ordered by name (bytewise, as
// SQLite does).
func (d *DB) ListTemplates(ctx context.Context) ([]*store.Template, error) {
	return list(ctx, d, "templates", "SELECT "+templateColumns+` FROM templates ORDER BY name COLLATE "C"`, scanTemplate)
}

// DeleteTemplate removes a template; store.ErrNotFound if it did not exist.
func (d *DB) DeleteTemplate(ctx context.Context, name string) error {
	return d.deleteRow(ctx, "DELETE FROM templates WHERE name = $1", "template", name)
}

// GetSetting returns a setting's value or store.ErrNotFound.
func (d *DB) GetSetting(ctx context.Context, key string) (string, error) {
	var v string
	err := d.queryRow(ctx, func(r pgx.Row) error { return r.Scan(&v) }, "SELECT value FROM settings WHERE key = $1", key)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("setting %s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("get setting %s: %w", key, err)
	}
	return v, nil
}

// PutSetting sets a setting.
func (d *DB) PutSetting(ctx context.Context, key, value string) error {
	if key == "" {
		return errors.New("put setting: empty key")
	}
	_, err := d.exec(ctx, `INSERT INTO settings (key, value) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
	if err != nil {
		return fmt.Errorf("put setting %s: %w", key, err)
	}
	return nil
}

// InitSetting stores value under key unless it has one, and returns the
// stored value.
func (d *DB) InitSetting(ctx context.Context, key, value string) (string, error) {
	if key == "" {
		return "", errors.New("init setting: empty key")
	}
	if _, err := d.exec(ctx, `INSERT INTO settings (key, value) VALUES ($1, $2)
		ON CONFLICT (key) DO NOTHING`, key, value); err != nil {
		return "", fmt.Errorf("init setting %s: %w", key, err)
	}
	return d.GetSetting(ctx, key)
}

// list runs query and scans every row with scan.
func list[T any](ctx context.Context, d *DB, what, query string, scan func(pgx.Row) (*T, error), args ...any) ([]*T, error) {
	var out []*T
	err := d.run(ctx, func(ctx context.Context) error {
		out = nil
		rows, err := d.pool.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			v, err := scan(rows)
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	return out, nil
}

// deleteRow runs query, whose first argument is key, and reports
// store.ErrNotFound when it affected (or, for a SELECT, returned) no row.
func (d *DB) deleteRow(ctx context.Context, query, kind, key string, more ...any) error {
	tag, err := d.exec(ctx, query, append([]any{key}, more...)...)
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", kind, key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s %s: %w", kind, key, store.ErrNotFound)
	}
	return nil
}

// encodeTime maps the zero time to NULL (timestamptz keeps microseconds).
func encodeTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func decodeTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// encodeMap encodes a map as a JSON object for a jsonb column; nil and
// empty maps both become "{}". jsonb cannot hold U+0000, so a map with a
// NUL character is refused here with a clear message.
func encodeMap(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	for k, v := range m {
		if strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0) {
			return "", fmt.Errorf("key %q: a NUL character cannot be stored in PostgreSQL", k)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// decodeMap returns nil for an empty object so that a nil map round-trips.
func decodeMap(s string) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}
