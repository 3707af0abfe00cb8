// Package store records sandboxes, templates and API keys. The interfaces are
// small on purpose; two backends implement all of them (Full): embedded
// SQLite (internal/store/sqlite, the single-host default) and PostgreSQL
// (internal/store/postgres, shared by the hosts of a cluster). Their
// behaviour is pinned by one conformance suite, internal/store/storetest.
//
// Times are kept to the microsecond (PostgreSQL's resolution) and come back
// in UTC; the zero time round-trips. Spec, Extra and Logs fields are opaque
// text (JSON by convention) and come back byte for byte.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Store (internal/store: SQLite or PostgreSQL)
//
// The daemon keeps its records behind `store.Full` (`Store` + `SnapshotStore` + `TemplateBuildStore`,
// `internal/store/store.go`) and never names a backend past `internal/daemon/store.go`, which opens
// the one `--store` names (`$AIRLOCK_STORE` by default):
//
//   - **SQLite** (empty `--store`, the default; `internal/store/sqlite`): `<data-dir>/airlock.db`,
//     modernc's pure-Go driver, WAL. The single-host install needs nothing else.
//
//   - **PostgreSQL** (`--store postgres://user:password@host:port/db?sslmode=…`; the password may come
//     from `$PGPASSWORD` instead; `internal/store/postgres`): pgx v5 with a `pgxpool` pool, for the hosts
//     of a cluster (issue 17). Start fails within 60 s, with the reason, when the server cannot be
//     reached. A handle is scoped to one node (below); one daemon per node id, enforced by the
//     daemon lease (below): a second daemon of the same node would take the first's sandboxes for its
//     own at restore and remove them.
//
// **Schema.** Both hold the same tables: `sandboxes`, `templates` (one row per name; a tagged template
// is a row named `name:tag`), `settings` (API key, `schema_version`), `snapshots`, `template_builds`,
// and `schema_migrations` (version, name, applied_at). PostgreSQL adds `node_id` (text, `”` = `--role
// all`) to `sandboxes`, `snapshots` and `template_builds`, and the tables `daemon_lease` (one row per
// node id), `nodes` (every field of `cluster.Node`: address, state `live|draining|lost`, runtime,
// labels, version, heartbeat generation, capacity and what is reserved, templates held, warm pool,
// `started_at`, `heartbeat_at`, `lost_at`) and `lost_sandboxes` (sandbox id, node, `lost_at`, reason).
// SQLite stores times as unix nanoseconds (0 = the zero time) and maps as JSON text. PostgreSQL uses
// its own types: `timestamptz` (NULL = the zero time; microseconds, so the interface promises times to
// the microsecond, in UTC), `bigint` sizes, `boolean`, and `jsonb` for the sandbox's metadata and env
// vars (objects the store encodes itself; a value with a NUL character is refused, jsonb cannot hold
// U+0000). `spec`, `extra` and `logs` are `text` in both: documents other packages own, returned byte
// for byte, possibly empty.
//
// **Events and webhooks** (migration 7). `events` (`seq` for a stable order among equal times, uuid `id`, type, `ts`, sandbox,
// execution, template, build, team, `data` = eventData JSON), `webhooks` (events as a JSON list,
// secret: sealed by internal/webhooks, "sealed:v1:…", or a legacy clear value),
// `webhook_deliveries` (the outbox: one row per pending delivery, `attempts`, `next_at`,
// `lease_owner`, `lease_until`) and `webhook_attempts` (one row per attempt, E2B's
// WebhookDelivery). None belongs to a node. With an event hook (`SetEventHook`) sandbox and snapshot
// writes run in a transaction that also inserts the hook's events and their deliveries
// (`events.go` in each backend); `ClaimDeliveries` leases due rows (PostgreSQL: `FOR UPDATE SKIP
// LOCKED`), `FinishDelivery` records an attempt and deletes or re-arms the row only for the lease's
// holder. The conformance suite covers it (`EventsWithSandboxChanges`, `WebhookDeliveries`,
// `ConcurrentClaims`).
//
// **Migrations.** Each backend has an ordered, append-only list (`migrate.go`; SQLite got its schema
// in three steps; PostgreSQL's are the schema, the daemon lease, then the cluster: `node_id` columns
// with their indexes, `nodes`, `lost_sandboxes`, and the lease keyed by node id, an existing holder's
// row becoming node `”`'s, so a single host upgrades in place, `TestMigrateFrom2`); `Open` applies
// the missing ones, each in a transaction with its `schema_migrations` row, and refuses a database
// newer than the binary. On PostgreSQL several daemons may start at once: `Open` takes a session
// advisory lock (`pg_advisory_lock`, key `0x4169726c6f636b31`, "Airlock1") on one pooled connection
// before it even creates `schema_migrations`, so one daemon migrates and the others wait, then find
// nothing to do (`TestMigrations/ConcurrentOpensMigrateOnce`, `OpenWaitsForTheLock`).
//
// **Node scope (PostgreSQL).** `postgres.OpenWith(ctx, url, Options{NodeID}, log)` scopes a handle to
// a node (`Open` is node `”`, `--role all`): every `store.Full` query on sandboxes, snapshots and
// template builds has `node_id = <its node>`, and its puts write it. Nodes sharing a database never
// restore, list or delete each other's rows (`TestNodeScope`; the conformance suite also runs on a
// scoped handle); a put of an id another node holds moves the row to this node (a paused sandbox
// resumed elsewhere). Templates and settings (API key) are shared by every node.
//
// **Daemon lease (PostgreSQL; `lease.go`).** One daemon per node id. `daemon_lease` holds one row per
// node id (`”` for `--role all`): the holder's owner id (random per process), hostname, pid,
// `started_at` and `heartbeat_at`; daemons of different nodes coexist (`TestLeasePerNode`).
// `openStore` takes it right after `Open`, before the API key and the restore: an `INSERT … ON
// CONFLICT DO UPDATE … WHERE heartbeat_at < now() - 30 s` succeeds when there is no row or the
// holder's heartbeat is stale, and a concurrent start loses (the row is locked and the condition
// rechecked). Otherwise start fails with `database already used by the airlock daemon on host H (pid
// P), last seen 4 s ago; one single-host daemon per database (several hosts share one as cluster nodes: --role node)` (node `”`), or `node id N
// already used by the airlock daemon on host H (pid P), last seen 4 s ago; one daemon per node id`.
// Every time written and compared is the server's `now()`, never a daemon's clock. The holder
// heartbeats every 10 s (`UPDATE … SET heartbeat_at = now() WHERE node_id = $node AND owner = $me`)
// through the reconnecting pool; a failed heartbeat is logged and retried every 2 s, so a server
// restart does not cost the lease (`TestLeaseSurvivesServerRestart`: down for a second, past the
// staleness bound nobody else gets in). A heartbeat that updates no row means another daemon took the
// lease (this one was cut off for more than 30 s): the lease is lost, the store refuses every
// operation with `store.ErrLeaseLost`, and the daemon logs an error and shuts down (`watchStoreLease`
// cancels `Run`'s context with the reason, which `Run` returns) rather than fight; its sandboxes are
// left as they are. Before that, a holder that has not confirmed its lease for 20 s (stale bound minus
// one heartbeat: the database was unreachable) refuses operations (`postgres.ErrLeaseUnconfirmed`)
// until a heartbeat gets through, so its writes stop before another daemon can take over. Closing the
// store deletes the row (only its own), so a restart is immediate; a killed daemon's successor waits
// up to 30 s. SQLite has no lease: the data-dir lock (`internal/daemonlock`) already keeps a second
// daemon off its file. `postgres.Open` alone takes no lease (tools and tests may open several
// handles).
//
// **Lost connections.** When the server restarts, every idle connection in the pool is dead. The
// first call that meets one (SQLSTATE class 08 or 57, or an error pgx marks safe to retry) resets
// the pool and, when the statement cannot have taken effect (never sent, or the server ended the
// session: 57P01/57P02), runs once more on a fresh connection. Callers see no error from a restart
// that finished before their call; calls while the server is down fail with the reason
// (`TestReconnectAfterServerRestart`: eight concurrent writes right after a restart all succeed).
//
// **LISTEN/NOTIFY** (`postgres.DB.Notify`, `Listen`): the api tier's route caches.
// `Listen` subscribes on a connection of its own, outside the pool, and returns once `LISTEN` ran, so a
// `Notify` after it is seen. After that connection breaks it reconnects with backoff (100 ms to
// 5 s), listens again and delivers a `Notification{Resync: true}`: what was sent in between is lost,
// so a cache must be dropped. Its channel closes when the context ends or the store is closed.
// The routes channel is `airlock_routes` (`postgres.RoutesChannel`), payload a sandbox id: sent by
// the statement that deletes a sandbox's row (`WITH gone AS (DELETE … RETURNING id) SELECT
// pg_notify(…) FROM gone`, so only when a row went, at its commit), by a put that moves a row to
// another node, and by the reaper. `WatchRoutes` turns it into `cluster.RouteChange`s (a reconnect
// is `Resync`).
//
// **Cluster rows (PostgreSQL; `cluster.go`, `cluster.Store`).** Unscoped: they see every node.
// `Heartbeat` upserts the node's row with `heartbeat_at = now()`; a new row starts `live`, an existing
// one keeps its state (a drain or loss stays until `SetNodeState`, which clears `lost_at` unless the
// state is `lost`), and the stored state is returned. `Nodes` fills `Age = now() - heartbeat_at` by the
// server's clock. `SandboxNode`, `SnapshotNode` (id, else the newest with that name), `BuildNode`,
// `TemplateBuildNode` (the template's newest build) and `SandboxTokens` read `node_id`; a miss is
// `cluster.ErrNotFound`. `ReapLostNodes(bound)` runs in one transaction under
// `pg_try_advisory_xact_lock(0x4169726c6f636b32)` ("Airlock2"; an instance that does not get it returns
// at once with nothing, so concurrent api instances never both reap): nodes not yet lost whose
// heartbeat is older than `bound` become `lost` (`lost_at = now()`); their `running` sandboxes' rows
// are deleted, each recorded in `lost_sandboxes` with `node n2 was lost: no heartbeat for 15s` and
// announced on `airlock_routes`; paused rows stay (their images are on the node's disk). Records older
// than 24 h are dropped there too; `LostSandbox` reads one.
//
// **Tests against a real PostgreSQL.** `internal/store/storetest.Run` is the one behavioural suite
// (CRUD, zero values, ordering, tags, reopen, two handles writing concurrently, snapshots, builds);
// `sqlite` and `postgres` each run it (`TestConformance`), PostgreSQL with a fresh database per
// test, also on a node-scoped handle (`TestConformanceScoped`). `internal/store/postgres/pgtest` starts the server: Debian 12's `postgresql` (15,
// `/usr/lib/postgresql/15/bin`), `initdb` into a temporary directory, `postgres` on a loopback port
// picked free with scram password authentication, fsync off. PostgreSQL refuses to run as root, so
// under root both run as the package's `postgres` user (`SysProcAttr.Credential`, the same as
// `runuser -u postgres`); the server gets SIGQUIT if the test binary dies, and a fast shutdown
// plus removal of the directory when the test ends. Missing binaries fail the test with the package's
// name; `scripts/test.sh` installs `postgresql` in its setup stage (tests only, with
// `create_main_cluster = false` so the package starts no server of its own).
package store
