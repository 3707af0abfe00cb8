package sqlite

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// migration is one forward-only schema step. Versions are 1-based and equal
// to the migration's position in migrations; never edit or reorder a
// migration that has shipped, append a new one instead.
type migration struct {
	name string
	sql  string
}

var migrations = []migration{
	{
		name: "initial schema",
		sql: `
CREATE TABLE sandboxes (
	id             TEXT PRIMARY KEY,
	template_id    TEXT NOT NULL DEFAULT '',
	template_hash  TEXT NOT NULL DEFAULT '',
	alias          TEXT NOT NULL DEFAULT '',
	state          TEXT NOT NULL DEFAULT '',
	runtime        TEXT NOT NULL DEFAULT '',
	slot           INTEGER NOT NULL DEFAULT 0,
	guest_ip       TEXT NOT NULL DEFAULT '',
	access_token   TEXT NOT NULL DEFAULT '',
	traffic_token  TEXT NOT NULL DEFAULT '',
	metadata       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
	env_vars       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(env_vars)),
	allow_internet INTEGER NOT NULL DEFAULT 0,
	cpu_count      INTEGER NOT NULL DEFAULT 0,
	memory_mb      INTEGER NOT NULL DEFAULT 0,
	disk_size_mb   INTEGER NOT NULL DEFAULT 0,
	started_at     INTEGER NOT NULL DEFAULT 0, -- unix nanoseconds, UTC
	end_at         INTEGER NOT NULL DEFAULT 0, -- unix nanoseconds, UTC
	on_timeout     TEXT NOT NULL DEFAULT 'kill',
	extra          TEXT NOT NULL DEFAULT ''
);
CREATE INDEX sandboxes_started_at ON sandboxes (started_at);
CREATE TABLE templates (
	name       TEXT PRIMARY KEY,
	hash       TEXT NOT NULL DEFAULT '',
	runtime    TEXT NOT NULL DEFAULT '',
	size_bytes INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL DEFAULT 0, -- unix nanoseconds, UTC
	spec       TEXT NOT NULL DEFAULT ''
);
CREATE TABLE settings (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);`,
	},
	{
		name: "snapshots",
		sql: `
CREATE TABLE snapshots (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL DEFAULT '',
	sandbox_id TEXT NOT NULL DEFAULT '',
	size_bytes INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL DEFAULT 0, -- unix nanoseconds, UTC
	spec       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX snapshots_created_at ON snapshots (created_at, id);`,
	},
	{
		name: "template builds",
		sql: `
CREATE TABLE template_builds (
	id          TEXT PRIMARY KEY,
	template_id TEXT NOT NULL DEFAULT '',
	status      TEXT NOT NULL DEFAULT '',
	created_at  INTEGER NOT NULL DEFAULT 0, -- unix nanoseconds, UTC
	updated_at  INTEGER NOT NULL DEFAULT 0, -- unix nanoseconds, UTC
	spec        TEXT NOT NULL DEFAULT '',
	logs        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX template_builds_template ON template_builds (template_id, created_at);`,
	},
	{
		name: "template artifact digest",
		sql:  `ALTER TABLE templates ADD COLUMN artifact_digest TEXT NOT NULL DEFAULT '';`,
	},
	{
		// E2B volumes (internal/volume): names are unique per API key,
		// and a daemon has one key.
		name: "volumes",
		sql: `
CREATE TABLE volumes (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL UNIQUE,
	size_bytes INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL DEFAULT 0 -- unix nanoseconds, UTC
);
CREATE INDEX volumes_created_at ON volumes (created_at, id);`,
	},
	{
		// Bucket volumes (internal/volume/bucket.go): the bucket's
		// settings as JSON, its credentials sealed (internal/secretbox);
		// '' for a volume the node's Backing keeps.
		name: "volume buckets",
		sql:  `ALTER TABLE volumes ADD COLUMN bucket TEXT NOT NULL DEFAULT '';`,
	},
	{
		// Lifecycle events and webhooks (internal/events, events.go).
		name: "lifecycle events and webhooks",
		sql: `
CREATE TABLE events (
	seq          INTEGER PRIMARY KEY AUTOINCREMENT,
	id           TEXT NOT NULL UNIQUE,
	type         TEXT NOT NULL,
	ts           INTEGER NOT NULL, -- unix nanoseconds, UTC
	sandbox_id   TEXT NOT NULL,
	execution_id TEXT NOT NULL DEFAULT '',
	template_id  TEXT NOT NULL DEFAULT '',
	build_id     TEXT NOT NULL DEFAULT '',
	team_id      TEXT NOT NULL DEFAULT '',
	data         TEXT NOT NULL DEFAULT ''
);
CREATE INDEX events_sandbox ON events (sandbox_id, ts, seq);
CREATE INDEX events_ts ON events (ts, seq);
CREATE TABLE webhooks (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL DEFAULT '',
	url        TEXT NOT NULL,
	events     TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(events)),
	enabled    INTEGER NOT NULL DEFAULT 1,
	secret     TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE webhook_deliveries (
	event_id    TEXT NOT NULL,
	webhook_id  TEXT NOT NULL,
	attempts    INTEGER NOT NULL DEFAULT 0,
	next_at     INTEGER NOT NULL DEFAULT 0, -- unix nanoseconds
	lease_owner TEXT NOT NULL DEFAULT '',
	lease_until INTEGER NOT NULL DEFAULT 0, -- unix nanoseconds
	PRIMARY KEY (event_id, webhook_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at);
CREATE TABLE webhook_attempts (
	id               TEXT PRIMARY KEY,
	webhook_id       TEXT NOT NULL,
	event_id         TEXT NOT NULL,
	sandbox_id       TEXT NOT NULL DEFAULT '',
	event_type       TEXT NOT NULL DEFAULT '',
	status           TEXT NOT NULL,
	duration_ms      INTEGER NOT NULL DEFAULT 0,
	request_body     TEXT NOT NULL DEFAULT '',
	request_headers  TEXT NOT NULL DEFAULT '',
	request_url      TEXT NOT NULL DEFAULT '',
	response_body    TEXT NOT NULL DEFAULT '',
	response_headers TEXT NOT NULL DEFAULT '',
	response_status  INTEGER NOT NULL DEFAULT 0,
	error_class      TEXT NOT NULL DEFAULT '',
	error_message    TEXT NOT NULL DEFAULT '',
	ts               INTEGER NOT NULL -- unix nanoseconds
);
CREATE INDEX webhook_attempts_webhook ON webhook_attempts (webhook_id, ts);`,
	},
	{
		// E2B egress secrets (issue 29; migration 8): the
		// value only sealed (internal/secretbox), names unique per API key.
		name: "secrets",
		sql: `
CREATE TABLE secrets (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL UNIQUE,
	version    INTEGER NOT NULL DEFAULT 1,
	sealed     BLOB NOT NULL,
	metadata   TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
	created_at INTEGER NOT NULL DEFAULT 0, -- unix nanoseconds, UTC
	updated_at INTEGER NOT NULL DEFAULT 0  -- unix nanoseconds, UTC
);
CREATE INDEX secrets_created_at ON secrets (created_at, id);`,
	},
}

// migrate applies every migration newer than the recorded schema version,
// each in its own transaction together with its schema_migrations row.
func (d *DB) migrate(ctx context.Context) error {
	if _, err := d.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	if err := d.applyMigrations(ctx, migrations); err != nil {
		return err
	}
	// Mirror the version into settings for operators reading the database.
	return d.PutSetting(ctx, SchemaVersionKey, strconv.Itoa(len(migrations)))
}

// SchemaVersionKey is the settings key holding the applied schema version.
const SchemaVersionKey = "schema_version"

func (d *DB) applyMigrations(ctx context.Context, list []migration) error {
	current, err := d.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if current > len(list) {
		return fmt.Errorf("database schema version %d is newer than this binary supports (%d)", current, len(list))
	}
	for i := current; i < len(list); i++ {
		m := list[i]
		version := i + 1
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migration %d (%s): begin: %w", version, m.name, err)
		}
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d (%s): %w", version, m.name, err)
		}
		if _, err := tx.ExecContext(ctx,
			"INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
			version, m.name, time.Now().UnixNano()); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d (%s): recording: %w", version, m.name, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %d (%s): commit: %w", version, m.name, err)
		}
	}
	return nil
}
