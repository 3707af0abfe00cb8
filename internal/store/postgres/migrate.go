package postgres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// migration is one forward-only schema step. Versions are 1-based and equal
// to the migration's position in migrations; never edit or reorder a
// migration that has shipped, append a new one instead.
type migration struct {
	name string
	sql  string
}

// migrations hold the same content as the SQLite schema (which got there
// in three steps), plus the daemon lease (SQLite has the data-dir lock)
// and the cluster's tables, in PostgreSQL's types: timestamptz (NULL for
// the zero time), bigint sizes, boolean flags, jsonb for the maps the store encodes
// itself. Spec, extra and logs stay text: they are documents owned by other
// layers that must come back byte for byte, may be empty, and may carry
// "\u0000" escapes that jsonb refuses.
var migrations = []migration{
	{
		name: "initial schema",
		sql: `
CREATE TABLE sandboxes (
	id             text PRIMARY KEY,
	template_id    text NOT NULL DEFAULT '',
	template_hash  text NOT NULL DEFAULT '',
	alias          text NOT NULL DEFAULT '',
	state          text NOT NULL DEFAULT '',
	runtime        text NOT NULL DEFAULT '',
	slot           integer NOT NULL DEFAULT 0,
	guest_ip       text NOT NULL DEFAULT '',
	access_token   text NOT NULL DEFAULT '',
	traffic_token  text NOT NULL DEFAULT '',
	metadata       jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
	env_vars       jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(env_vars) = 'object'),
	allow_internet boolean NOT NULL DEFAULT false,
	cpu_count      integer NOT NULL DEFAULT 0,
	memory_mb      integer NOT NULL DEFAULT 0,
	disk_size_mb   integer NOT NULL DEFAULT 0,
	started_at     timestamptz,
	end_at         timestamptz,
	on_timeout     text NOT NULL DEFAULT 'kill',
	extra          text NOT NULL DEFAULT ''
);
CREATE INDEX sandboxes_started_at ON sandboxes (started_at NULLS FIRST, id);
CREATE TABLE templates (
	name       text PRIMARY KEY, -- "name" or "name:tag"
	hash       text NOT NULL DEFAULT '',
	runtime    text NOT NULL DEFAULT '',
	size_bytes bigint NOT NULL DEFAULT 0,
	created_at timestamptz,
	spec       text NOT NULL DEFAULT ''
);
CREATE TABLE settings (
	key   text PRIMARY KEY,
	value text NOT NULL
);
CREATE TABLE snapshots (
	id         text PRIMARY KEY,
	name       text NOT NULL DEFAULT '',
	sandbox_id text NOT NULL DEFAULT '',
	size_bytes bigint NOT NULL DEFAULT 0,
	created_at timestamptz,
	spec       text NOT NULL DEFAULT ''
);
CREATE INDEX snapshots_created_at ON snapshots (created_at NULLS FIRST, id);
CREATE TABLE template_builds (
	id          text PRIMARY KEY,
	template_id text NOT NULL DEFAULT '',
	status      text NOT NULL DEFAULT '',
	created_at  timestamptz,
	updated_at  timestamptz,
	spec        text NOT NULL DEFAULT '',
	logs        text NOT NULL DEFAULT ''
);
CREATE INDEX template_builds_template ON template_builds (template_id, created_at);`,
	},
	{
		// One row at most (id is always true): the daemon that may act on
		// the database (lease.go). Times are the server's clock.
		name: "daemon lease",
		sql: `
CREATE TABLE daemon_lease (
	id           boolean PRIMARY KEY DEFAULT true CHECK (id),
	owner        text NOT NULL,
	hostname     text NOT NULL,
	pid          integer NOT NULL,
	started_at   timestamptz NOT NULL,
	heartbeat_at timestamptz NOT NULL
);`,
	},
	{
		// The cluster roles (issue 17, internal/cluster). Sandboxes,
		// snapshots and builds belong to the node that runs or holds them;
		// rows from before get '', the scope of --role all, so a single
		// host upgrades in place. The lease becomes one row per node id,
		// keeping a running holder's row (as node ''). Nodes and lost
		// sandboxes are the cluster's own rows (cluster.go).
		name: "cluster",
		sql: `
CREATE TABLE nodes (
	id                 text PRIMARY KEY,
	addr               text NOT NULL DEFAULT '',
	state              text NOT NULL DEFAULT 'live' CHECK (state IN ('live', 'draining', 'lost')),
	runtime            text NOT NULL DEFAULT '',
	labels             jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(labels) = 'array'),
	version            text NOT NULL DEFAULT '',
	gen                bigint NOT NULL DEFAULT 0,
	cpus               integer NOT NULL DEFAULT 0,
	memory_mb          integer NOT NULL DEFAULT 0,
	disk_mb            integer NOT NULL DEFAULT 0,
	max_sandboxes      integer NOT NULL DEFAULT 0,
	reserved_cpus      integer NOT NULL DEFAULT 0,
	reserved_memory_mb integer NOT NULL DEFAULT 0,
	sandboxes          integer NOT NULL DEFAULT 0,
	templates          jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(templates) = 'array'),
	warm_pool          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(warm_pool) = 'object'),
	started_at         timestamptz,
	heartbeat_at       timestamptz NOT NULL DEFAULT now(),
	lost_at            timestamptz
);
ALTER TABLE sandboxes ADD COLUMN node_id text NOT NULL DEFAULT '';
ALTER TABLE snapshots ADD COLUMN node_id text NOT NULL DEFAULT '';
ALTER TABLE template_builds ADD COLUMN node_id text NOT NULL DEFAULT '';
-- A node lists its own rows in the order the store returns them; the
-- reaper finds a lost node's running sandboxes.
CREATE INDEX sandboxes_node ON sandboxes (node_id, started_at NULLS FIRST, id);
CREATE INDEX snapshots_node ON snapshots (node_id, created_at NULLS FIRST, id);
CREATE INDEX snapshots_name ON snapshots (name) WHERE name <> '';
CREATE INDEX template_builds_node ON template_builds (node_id, template_id, created_at);
CREATE TABLE lost_sandboxes (
	sandbox_id text PRIMARY KEY,
	node_id    text NOT NULL,
	lost_at    timestamptz NOT NULL,
	reason     text NOT NULL
);
CREATE INDEX lost_sandboxes_lost_at ON lost_sandboxes (lost_at);
ALTER TABLE daemon_lease ADD COLUMN node_id text NOT NULL DEFAULT '';
ALTER TABLE daemon_lease DROP COLUMN id; -- and with it the one-row key
ALTER TABLE daemon_lease ADD PRIMARY KEY (node_id);`,
	},
	{
		name: "template artifact digest",
		sql:  `ALTER TABLE templates ADD COLUMN artifact_digest text NOT NULL DEFAULT '';`,
	},
	{
		// E2B volumes (internal/volume): the cluster's, no node's; names
		// are unique per API key, and a cluster has one key.
		name: "volumes",
		sql: `
CREATE TABLE volumes (
	id         text PRIMARY KEY,
	name       text NOT NULL UNIQUE,
	size_bytes bigint NOT NULL DEFAULT 0,
	created_at timestamptz
);
CREATE INDEX volumes_created_at ON volumes (created_at NULLS FIRST, id);`,
	},
	{
		// Bucket volumes (internal/volume/bucket.go): the bucket's
		// settings as JSON, its credentials sealed (internal/secretbox);
		// '' for a volume the nodes' Backing keeps.
		name: "volume buckets",
		sql:  `ALTER TABLE volumes ADD COLUMN bucket text NOT NULL DEFAULT '';`,
	},
	{
		// Lifecycle events and webhooks (internal/events, events.go): the
		// cluster's, no node's. webhook_deliveries is the outbox: a row per
		// pending delivery, leased by one api instance at a time
		// (FOR UPDATE SKIP LOCKED, lease_until).
		name: "lifecycle events and webhooks",
		sql: `
CREATE TABLE events (
	seq          bigserial PRIMARY KEY,
	id           text NOT NULL UNIQUE,
	type         text NOT NULL,
	ts           timestamptz NOT NULL,
	sandbox_id   text NOT NULL,
	execution_id text NOT NULL DEFAULT '',
	template_id  text NOT NULL DEFAULT '',
	build_id     text NOT NULL DEFAULT '',
	team_id      text NOT NULL DEFAULT '',
	data         text NOT NULL DEFAULT ''
);
CREATE INDEX events_sandbox ON events (sandbox_id, ts, seq);
CREATE INDEX events_ts ON events (ts, seq);
CREATE TABLE webhooks (
	id         text PRIMARY KEY,
	name       text NOT NULL DEFAULT '',
	url        text NOT NULL,
	events     jsonb NOT NULL DEFAULT '[]',
	enabled    boolean NOT NULL DEFAULT true,
	secret     text NOT NULL DEFAULT '',
	created_at timestamptz
);
CREATE TABLE webhook_deliveries (
	event_id    text NOT NULL,
	webhook_id  text NOT NULL,
	attempts    integer NOT NULL DEFAULT 0,
	next_at     timestamptz NOT NULL DEFAULT now(),
	lease_owner text NOT NULL DEFAULT '',
	lease_until timestamptz NOT NULL DEFAULT '-infinity',
	PRIMARY KEY (event_id, webhook_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at);
CREATE TABLE webhook_attempts (
	id               text PRIMARY KEY,
	webhook_id       text NOT NULL,
	event_id         text NOT NULL,
	sandbox_id       text NOT NULL DEFAULT '',
	event_type       text NOT NULL DEFAULT '',
	status           text NOT NULL,
	duration_ms      bigint NOT NULL DEFAULT 0,
	request_body     text NOT NULL DEFAULT '',
	request_headers  text NOT NULL DEFAULT '',
	request_url      text NOT NULL DEFAULT '',
	response_body    text NOT NULL DEFAULT '',
	response_headers text NOT NULL DEFAULT '',
	response_status  integer NOT NULL DEFAULT 0,
	error_class      text NOT NULL DEFAULT '',
	error_message    text NOT NULL DEFAULT '',
	ts               timestamptz NOT NULL
);
CREATE INDEX webhook_attempts_webhook ON webhook_attempts (webhook_id, ts);`,
	},
	{
		// E2B egress secrets (issue 29; migration 8): the
		// cluster's, no node's; the value only sealed (internal/secretbox).
		name: "secrets",
		sql: `
CREATE TABLE secrets (
	id         text PRIMARY KEY,
	name       text NOT NULL UNIQUE,
	version    bigint NOT NULL DEFAULT 1,
	sealed     bytea NOT NULL,
	metadata   text NOT NULL DEFAULT '{}',
	created_at timestamptz,
	updated_at timestamptz
);
CREATE INDEX secrets_created_at ON secrets (created_at NULLS FIRST, id);`,
	},
}

// SchemaVersionKey is the settings key mirroring the applied schema
// version (as in the SQLite store).
const SchemaVersionKey = "schema_version"

// migrationLock is the advisory lock key held while migrating ("Airlock1"
// in ASCII). Every daemon starting on the database takes it, so one of them
// migrates and the others then find nothing left to do.
const migrationLock int64 = 0x4169726c6f636b31

// migrate applies every migration newer than the recorded schema version,
// holding migrationLock.
func (d *DB) migrate(ctx context.Context) error {
	return d.migrateTo(ctx, migrations)
}

func (d *DB) migrateTo(ctx context.Context, list []migration) (err error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLock); err != nil {
		return fmt.Errorf("migrating: taking the migration lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", migrationLock); uerr != nil {
			// The lock belongs to the session: closing it releases the
			// lock, and the pool drops a closed connection.
			d.log.Warn("releasing the migration lock failed; closing its connection", "err", uerr)
			_ = conn.Conn().Close(uctx)
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	if err := applyMigrations(ctx, conn, list); err != nil {
		return err
	}
	// Mirror the version into settings for operators reading the database.
	if _, err := conn.Exec(ctx, `INSERT INTO settings (key, value) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, SchemaVersionKey, strconv.Itoa(len(list))); err != nil {
		return fmt.Errorf("recording the schema version: %w", err)
	}
	return nil
}

// applyMigrations runs the missing migrations of list on conn, each in its
// own transaction together with its schema_migrations row. The caller
// holds migrationLock.
func applyMigrations(ctx context.Context, conn *pgxpool.Conn, list []migration) error {
	current, err := schemaVersion(ctx, conn)
	if err != nil {
		return err
	}
	if current > len(list) {
		return fmt.Errorf("database schema version %d is newer than this binary supports (%d)", current, len(list))
	}
	for i := current; i < len(list); i++ {
		m, version := list[i], i+1
		tx, err := conn.Begin(ctx)
		if err != nil {
			return fmt.Errorf("migration %d (%s): begin: %w", version, m.name, err)
		}
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			_ = tx.Rollback(ctx)
			return fmt.Errorf("migration %d (%s): %w", version, m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", version, m.name); err != nil {
			_ = tx.Rollback(ctx)
			return fmt.Errorf("migration %d (%s): recording: %w", version, m.name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("migration %d (%s): commit: %w", version, m.name, err)
		}
	}
	return nil
}

// SchemaVersion reports the number of applied migrations.
func (d *DB) SchemaVersion(ctx context.Context) (int, error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading schema version: %w", err)
	}
	defer conn.Release()
	return schemaVersion(ctx, conn)
}

func schemaVersion(ctx context.Context, conn *pgxpool.Conn) (int, error) {
	var v int
	if err := conn.QueryRow(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&v); err != nil {
		return 0, fmt.Errorf("reading schema version: %w", err)
	}
	return v, nil
}
