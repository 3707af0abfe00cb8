// Package sqlite implements store.Store on an embedded SQLite database using
// the pure-Go modernc.org/sqlite driver (no cgo). The database runs in WAL
// mode with foreign keys on and a busy timeout, and its schema is evolved by
// an ordered list of migrations recorded in the schema_migrations table.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// busyTimeout is how long a connection waits for a lock held by another
// connection (or process) before failing with SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// DB is a store.Store backed by one SQLite file. It is safe for concurrent
// use: database/sql pools connections, WAL lets readers run next to the
// single writer, and the busy timeout serialises concurrent writers.
type DB struct {
	db   *sql.DB
	path string
	hook atomic.Pointer[store.EventHook] // events.go
}

var _ store.Store = (*DB)(nil)

// Open opens (creating if needed) the database at path and brings its schema
// up to date. Use ":memory:" only for throwaway tests: each pooled
// connection would see a different in-memory database, so Open limits the
// pool to one connection in that case.
func Open(path string) (*DB, error) {
	return OpenContext(context.Background(), path)
}

// OpenContext is Open with a context bounding the migrations.
func OpenContext(ctx context.Context, path string) (*DB, error) {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_txlock", "immediate")
	memory := path == ":memory:"
	if !memory {
		q.Add("_pragma", "journal_mode(WAL)")
	}
	dsn := "file:" + path + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening sqlite %s: %w", path, err)
	}
	if memory {
		db.SetMaxOpenConns(1)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening sqlite %s: %w", path, err)
	}
	if !memory {
		var mode string
		if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			db.Close()
			return nil, fmt.Errorf("reading journal mode: %w", err)
		}
		if mode != "wal" {
			db.Close()
			return nil, fmt.Errorf("sqlite %s: journal mode is %q, want wal", path, mode)
		}
	}
	d := &DB{db: db, path: path}
	if err := d.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return d, nil
}

// Close closes the database.
func (d *DB) Close() error {
	if err := d.db.Close(); err != nil {
		return fmt.Errorf("closing sqlite %s: %w", d.path, err)
	}
	return nil
}

// SchemaVersion reports the number of applied migrations.
func (d *DB) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	if err := d.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&v); err != nil {
		return 0, fmt.Errorf("reading schema version: %w", err)
	}
	return v, nil
}

// PutSandbox inserts or replaces a sandbox row (with an event hook, in a
// transaction that records its events: events.go).
func (d *DB) PutSandbox(ctx context.Context, s *store.Sandbox) error {
	if s == nil || s.ID == "" {
		return errors.New("put sandbox: empty id")
	}
	if h := d.eventHook(); h != nil {
		return d.putSandboxEvents(ctx, s, h)
	}
	return putSandbox(ctx, d.db, s)
}

// execer is a *sql.DB or a *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func putSandbox(ctx context.Context, db execer, s *store.Sandbox) error {
	meta, err := encodeMap(s.Metadata)
	if err != nil {
		return fmt.Errorf("put sandbox %s: metadata: %w", s.ID, err)
	}
	envs, err := encodeMap(s.EnvVars)
	if err != nil {
		return fmt.Errorf("put sandbox %s: env vars: %w", s.ID, err)
	}
	_, err = db.ExecContext(ctx, `INSERT INTO sandboxes (
		id, template_id, template_hash, alias, state, runtime, slot, guest_ip,
		access_token, traffic_token, metadata, env_vars, allow_internet,
		cpu_count, memory_mb, disk_size_mb, started_at, end_at, on_timeout, extra
	) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
	ON CONFLICT(id) DO UPDATE SET
		template_id=excluded.template_id, template_hash=excluded.template_hash,
		alias=excluded.alias, state=excluded.state, runtime=excluded.runtime,
		slot=excluded.slot, guest_ip=excluded.guest_ip,
		access_token=excluded.access_token, traffic_token=excluded.traffic_token,
		metadata=excluded.metadata, env_vars=excluded.env_vars,
		allow_internet=excluded.allow_internet, cpu_count=excluded.cpu_count,
		memory_mb=excluded.memory_mb, disk_size_mb=excluded.disk_size_mb,
		started_at=excluded.started_at, end_at=excluded.end_at,
		on_timeout=excluded.on_timeout, extra=excluded.extra`,
		s.ID, s.TemplateID, s.TemplateHash, s.Alias, s.State, s.Runtime, s.Slot, s.GuestIP,
		s.AccessToken, s.TrafficToken, meta, envs, s.AllowInternet,
		s.CPUCount, s.MemoryMB, s.DiskSizeMB, encodeTime(s.StartedAt), encodeTime(s.EndAt),
		s.OnTimeout, s.Extra)
	if err != nil {
		return fmt.Errorf("put sandbox %s: %w", s.ID, err)
	}
	return nil
}

const sandboxColumns = `id, template_id, template_hash, alias, state, runtime, slot, guest_ip,
	access_token, traffic_token, metadata, env_vars, allow_internet,
	cpu_count, memory_mb, disk_size_mb, started_at, end_at, on_timeout, extra`

type scanner interface{ Scan(dest ...any) error }

func scanSandbox(r scanner) (*store.Sandbox, error) {
	var (
		s              store.Sandbox
		meta, envs     string
		started, endAt int64
	)
	err := r.Scan(&s.ID, &s.TemplateID, &s.TemplateHash, &s.Alias, &s.State, &s.Runtime, &s.Slot,
		&s.GuestIP, &s.AccessToken, &s.TrafficToken, &meta, &envs, &s.AllowInternet,
		&s.CPUCount, &s.MemoryMB, &s.DiskSizeMB, &started, &endAt, &s.OnTimeout, &s.Extra)
	if err != nil {
		return nil, err
	}
	if s.Metadata, err = decodeMap(meta); err != nil {
		return nil, fmt.Errorf("sandbox %s metadata: %w", s.ID, err)
	}
	if s.EnvVars, err = decodeMap(envs); err != nil {
		return nil, fmt.Errorf("sandbox %s env vars: %w", s.ID, err)
	}
	s.StartedAt = decodeTime(started)
	s.EndAt = decodeTime(endAt)
	return &s, nil
}

// GetSandbox returns one sandbox or store.ErrNotFound.
func (d *DB) GetSandbox(ctx context.Context, id string) (*store.Sandbox, error) {
	row := d.db.QueryRowContext(ctx, "SELECT "+sandboxColumns+" FROM sandboxes WHERE id = ?", id)
	s, err := scanSandbox(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sandbox %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return s, nil
}

// ListSandboxes returns all sandboxes, oldest first.
func (d *DB) ListSandboxes(ctx context.Context) ([]*store.Sandbox, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT "+sandboxColumns+" FROM sandboxes ORDER BY started_at, id")
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	defer rows.Close()
	var out []*store.Sandbox
	for rows.Next() {
		s, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

// DeleteSandbox removes a sandbox; store.ErrNotFound if it did not exist.
func (d *DB) DeleteSandbox(ctx context.Context, id string) error {
	if h := d.eventHook(); h != nil {
		n, err := d.deleteSandboxesEvents(ctx, []string{id}, h)
		if err == nil && n == 0 {
			err = fmt.Errorf("sandbox %s: %w", id, store.ErrNotFound)
		}
		return err
	}
	return d.deleteRow(ctx, "DELETE FROM sandboxes WHERE id = ?", "sandbox", id)
}

// PutTemplate inserts or replaces a template row (keyed by name).
func (d *DB) PutTemplate(ctx context.Context, t *store.Template) error {
	if t == nil || t.Name == "" {
		return errors.New("put template: empty name")
	}
	_, err := d.db.ExecContext(ctx, `INSERT INTO templates (`+templateColumns+`)
		VALUES (?,?,?,?,?,?,?)
		ON CONFLICT(name) DO UPDATE SET hash=excluded.hash, runtime=excluded.runtime,
		size_bytes=excluded.size_bytes, created_at=excluded.created_at, spec=excluded.spec,
		artifact_digest=excluded.artifact_digest`,
		t.Name, t.Hash, t.Runtime, t.SizeBytes, encodeTime(t.CreatedAt), t.Spec, t.ArtifactDigest)
	if err != nil {
		return fmt.Errorf("put template %s: %w", t.Name, err)
	}
	return nil
}

const templateColumns = "name, hash, runtime, size_bytes, created_at, spec, artifact_digest"

func scanTemplate(r scanner) (*store.Template, error) {
	var (
		t       store.Template
		created int64
	)
	if err := r.Scan(&t.Name, &t.Hash, &t.Runtime, &t.SizeBytes, &created, &t.Spec, &t.ArtifactDigest); err != nil {
		return nil, err
	}
	t.CreatedAt = decodeTime(created)
	return &t, nil
}

// GetTemplate returns one template or store.ErrNotFound.
func (d *DB) GetTemplate(ctx context.Context, name string) (*store.Template, error) {
	row := d.db.QueryRowContext(ctx, "SELECT "+templateColumns+" FROM templates WHERE name = ?", name)
	t, err := scanTemplate(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("template %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get template %s: %w", name, err)
	}
	return t, nil
}

// ListTemplates returns all templates ordered by name.
func (d *DB) ListTemplates(ctx context.Context) ([]*store.Template, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT "+templateColumns+" FROM templates ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	defer rows.Close()
	var out []*store.Template
	for rows.Next() {
		t, err := scanTemplate(rows)
		if err != nil {
			return nil, fmt.Errorf("list templates: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return out, nil
}

// DeleteTemplate removes a template; store.ErrNotFound if it did not exist.
func (d *DB) DeleteTemplate(ctx context.Context, name string) error {
	return d.deleteRow(ctx, "DELETE FROM templates WHERE name = ?", "template", name)
}

// GetSetting returns a setting's value or store.ErrNotFound.
func (d *DB) GetSetting(ctx context.Context, key string) (string, error) {
	var v string
	err := d.db.QueryRowContext(ctx, "SELECT value FROM settings WHERE key = ?", key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
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
	_, err := d.db.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES (?, ?)
		ON CONFLICT(key) DO UPDATE SET value = excluded.value`, key, value)
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
	if _, err := d.db.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES (?, ?)
		ON CONFLICT(key) DO NOTHING`, key, value); err != nil {
		return "", fmt.Errorf("init setting %s: %w", key, err)
	}
	return d.GetSetting(ctx, key)
}

func (d *DB) deleteRow(ctx context.Context, query, kind, key string) error {
	res, err := d.db.ExecContext(ctx, query, key)
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", kind, key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", kind, key, err)
	}
	if n == 0 {
		return fmt.Errorf("%s %s: %w", kind, key, store.ErrNotFound)
	}
	return nil
}

// encodeTime stores times as UTC unix nanoseconds; the zero time is 0 so it
// round-trips to time.Time{}.
func encodeTime(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func decodeTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// encodeMap stores maps as JSON objects; nil and empty maps both become "{}".
func encodeMap(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// decodeMap returns nil for an empty object so that a nil map round-trips.
func decodeMap(s string) (map[string]string, error) {
	if s == "" || s == "{}" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	return m, nil
}
