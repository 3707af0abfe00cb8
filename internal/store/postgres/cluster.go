package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-sandbox/airlock/internal/cluster"
)

// The cluster's own rows (internal/cluster): the nodes table, the routes
// of every node's sandboxes, snapshots and builds, and the sandboxes lost
// with their node. Unlike the store.Full methods these see every node,
// whatever the DB's node scope: the api tier routes across all of them.

// RoutesChannel is the NOTIFY channel on which a sandbox id is sent when
// its row is deleted (kill, timeout, loss of its node) or moves to another
// node (cluster.Store.WatchRoutes).
const RoutesChannel = "airlock_routes"

// reapLock is the transaction advisory lock key of ReapLostNodes
// ("Airlock2" in ASCII; migrationLock is "Airlock1"), so one api instance
// reaps at a time.
const reapLock int64 = 0x4169726c6f636b32

// lostRetention is how long a lost sandbox's record is kept (for the API
// to say why the sandbox is gone).
const lostRetention = 24 * time.Hour

var _ cluster.Store = (*DB)(nil)

const nodeColumns = `id, addr, state, runtime, labels, version, gen,
	cpus, memory_mb, disk_mb, max_sandboxes, reserved_cpus, reserved_memory_mb, sandboxes,
	templates, warm_pool, started_at, heartbeat_at, lost_at,
	(extract(epoch FROM now() - heartbeat_at) * 1000000)::bigint`

func scanNode(r pgx.Row) (*cluster.Node, error) {
	var (
		n                   cluster.Node
		labels, tpls, warm  string
		gen, ageMicros      int64
		started, beat, lost *time.Time
	)
	if err := r.Scan(&n.ID, &n.Addr, &n.State, &n.Runtime, &labels, &n.Version, &gen,
		&n.CPUs, &n.MemoryMB, &n.DiskMB, &n.MaxSandboxes, &n.ReservedCPUs, &n.ReservedMemoryMB, &n.Sandboxes,
		&tpls, &warm, &started, &beat, &lost, &ageMicros); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(labels), &n.Labels); err != nil {
		return nil, fmt.Errorf("node %s: labels: %w", n.ID, err)
	}
	if err := json.Unmarshal([]byte(tpls), &n.Templates); err != nil {
		return nil, fmt.Errorf("node %s: templates: %w", n.ID, err)
	}
	if err := json.Unmarshal([]byte(warm), &n.WarmPool); err != nil {
		return nil, fmt.Errorf("node %s: warm pool: %w", n.ID, err)
	}
	// Empty lists and maps come back nil, as an unset field went in.
	if len(n.Labels) == 0 {
		n.Labels = nil
	}
	if len(n.Templates) == 0 {
		n.Templates = nil
	}
	if len(n.WarmPool) == 0 {
		n.WarmPool = nil
	}
	n.Gen = uint64(gen)
	n.StartedAt, n.HeartbeatAt, n.LostAt = decodeTime(started), decodeTime(beat), decodeTime(lost)
	n.Age = time.Duration(ageMicros) * time.Microsecond
	return &n, nil
}

// encodeList encodes a string list as a JSON array for a jsonb column
// (nil is []); jsonb cannot hold U+0000.
func encodeList(l []string) (string, error) {
	if len(l) == 0 {
		return "[]", nil
	}
	for _, v := range l {
		if strings.ContainsRune(v, 0) {
			return "", fmt.Errorf("%q: a NUL character cannot be stored in PostgreSQL", v)
		}
	}
	b, err := json.Marshal(l)
	return string(b), err
}

// encodeCounts encodes a map of counts as a JSON object (nil is {}).
func encodeCounts(m map[string]int) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	for k := range m {
		if strings.ContainsRune(k, 0) {
			return "", fmt.Errorf("key %q: a NUL character cannot be stored in PostgreSQL", k)
		}
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// Heartbeat upserts the node's row with heartbeat_at = now() (the
// server's clock). A new node starts live; an existing row keeps its
// state, so a drain or a loss stays until SetNodeState changes it. It
// returns the stored state.
func (d *DB) Heartbeat(ctx context.Context, n cluster.Node) (string, error) {
	if n.ID == "" {
		return "", errors.New("heartbeat: empty node id")
	}
	if n.Gen > math.MaxInt64 {
		return "", fmt.Errorf("heartbeat of node %s: generation %d out of range", n.ID, n.Gen)
	}
	labels, err := encodeList(n.Labels)
	if err != nil {
		return "", fmt.Errorf("heartbeat of node %s: labels: %w", n.ID, err)
	}
	tpls, err := encodeList(n.Templates)
	if err != nil {
		return "", fmt.Errorf("heartbeat of node %s: templates: %w", n.ID, err)
	}
	warm, err := encodeCounts(n.WarmPool)
	if err != nil {
		return "", fmt.Errorf("heartbeat of node %s: warm pool: %w", n.ID, err)
	}
	var state string
	err = d.queryRow(ctx, func(r pgx.Row) error { return r.Scan(&state) },
		`INSERT INTO nodes (id, addr, state, runtime, labels, version, gen,
			cpus, memory_mb, disk_mb, max_sandboxes, reserved_cpus, reserved_memory_mb, sandboxes,
			templates, warm_pool, started_at, heartbeat_at)
		VALUES ($1, $2, 'live', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, now())
		ON CONFLICT (id) DO UPDATE SET addr=excluded.addr, runtime=excluded.runtime, labels=excluded.labels,
			version=excluded.version, gen=excluded.gen, cpus=excluded.cpus, memory_mb=excluded.memory_mb,
			disk_mb=excluded.disk_mb, max_sandboxes=excluded.max_sandboxes, reserved_cpus=excluded.reserved_cpus,
			reserved_memory_mb=excluded.reserved_memory_mb, sandboxes=excluded.sandboxes,
			templates=excluded.templates, warm_pool=excluded.warm_pool, started_at=excluded.started_at,
			heartbeat_at=excluded.heartbeat_at
		WHERE nodes.gen <= excluded.gen
		RETURNING state`,
		n.ID, n.Addr, n.Runtime, labels, n.Version, int64(n.Gen),
		n.CPUs, n.MemoryMB, n.DiskMB, n.MaxSandboxes, n.ReservedCPUs, n.ReservedMemoryMB, n.Sandboxes,
		tpls, warm, encodeTime(n.StartedAt))
	if errors.Is(err, pgx.ErrNoRows) {
		// A newer heartbeat is stored already (this one was late: its
		// generation is older); keep that one and report the state.
		err = d.queryRow(ctx, func(r pgx.Row) error { return r.Scan(&state) }, `SELECT state FROM nodes WHERE id = $1`, n.ID)
	}
	if err != nil {
		return "", fmt.Errorf("heartbeat of node %s: %w", n.ID, err)
	}
	return state, nil
}

// Touch marks node id as alive without changing its row otherwise (a node
// restarting, before its first full heartbeat): a node that is lost stays
// lost. Unknown ids are ignored.
func (d *DB) Touch(ctx context.Context, id string) error {
	_, err := d.exec(ctx, `UPDATE nodes SET heartbeat_at = now() WHERE id = $1 AND state <> 'lost'`, id)
	if err != nil {
		return fmt.Errorf("touching node %s: %w", id, err)
	}
	return nil
}

// SetNodeState sets a node's state. LostAt is kept only while the node is
// lost: it is set (if not already) when the state becomes lost and cleared
// otherwise.
func (d *DB) SetNodeState(ctx context.Context, id, state string) error {
	switch state {
	case cluster.StateLive, cluster.StateDraining, cluster.StateLost:
	default:
		return fmt.Errorf("set state of node %s: unknown state %q", id, state)
	}
	tag, err := d.exec(ctx, `UPDATE nodes SET state = $2,
		lost_at = CASE WHEN $2 = 'lost' THEN COALESCE(lost_at, now()) END
		WHERE id = $1`, id, state)
	if err != nil {
		return fmt.Errorf("set state of node %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("node %s: %w", id, cluster.ErrNotFound)
	}
	return nil
}

// Nodes lists every registered node by id, with Age by the server's clock.
func (d *DB) Nodes(ctx context.Context) ([]cluster.Node, error) {
	ptrs, err := list(ctx, d, "nodes", "SELECT "+nodeColumns+` FROM nodes ORDER BY id COLLATE "C"`, scanNode)
	if err != nil {
		return nil, err
	}
	return derefNodes(ptrs), nil
}

func derefNodes(ptrs []*cluster.Node) []cluster.Node {
	if len(ptrs) == 0 {
		return nil
	}
	out := make([]cluster.Node, len(ptrs))
	for i, n := range ptrs {
		out[i] = *n
	}
	return out
}

// RemoveNode deletes a node's row; cluster.ErrNotFound for an unknown
// node. Its sandboxes' rows are left alone (a node that comes back with
// the same id finds its paused sandboxes).
func (d *DB) RemoveNode(ctx context.Context, id string) error {
	tag, err := d.exec(ctx, "DELETE FROM nodes WHERE id = $1", id)
	if err != nil {
		return fmt.Errorf("remove node %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("node %s: %w", id, cluster.ErrNotFound)
	}
	return nil
}

// route runs a query returning one node id; cluster.ErrNotFound when it
// returns no row.
func (d *DB) route(ctx context.Context, what, key, query string) (string, error) {
	var node string
	err := d.queryRow(ctx, func(r pgx.Row) error { return r.Scan(&node) }, query, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("%s %s: %w", what, key, cluster.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("route of %s %s: %w", what, key, err)
	}
	return node, nil
}

// SandboxNode is the node owning a sandbox, running or paused.
func (d *DB) SandboxNode(ctx context.Context, sandboxID string) (string, error) {
	return d.route(ctx, "sandbox", sandboxID, "SELECT node_id FROM sandboxes WHERE id = $1")
}

// SnapshotNode is the node holding a snapshot: the one with that id, else
// the newest one with that name.
func (d *DB) SnapshotNode(ctx context.Context, idOrName string) (string, error) {
	return d.route(ctx, "snapshot", idOrName, `SELECT node_id FROM snapshots
		WHERE id = $1 OR (name = $1 AND name <> '')
		ORDER BY id = $1 DESC, created_at DESC NULLS LAST, id DESC LIMIT 1`)
}

// BuildNode is the node of a template build.
func (d *DB) BuildNode(ctx context.Context, buildID string) (string, error) {
	return d.route(ctx, "template build", buildID, "SELECT node_id FROM template_builds WHERE id = $1")
}

// TemplateBuildNode is the node of a template's newest build (the order of
// ListTemplateBuilds).
func (d *DB) TemplateBuildNode(ctx context.Context, templateID string) (string, error) {
	return d.route(ctx, "builds of template", templateID, `SELECT node_id FROM template_builds
		WHERE template_id = $1 ORDER BY created_at DESC NULLS LAST, id DESC LIMIT 1`)
}

// SandboxTokens lists every node's sandboxes that have an envd access
// token, with it, by sandbox id.
func (d *DB) SandboxTokens(ctx context.Context) ([]cluster.SandboxToken, error) {
	ptrs, err := list(ctx, d, "sandbox tokens", `SELECT id, node_id, access_token FROM sandboxes WHERE access_token <> '' ORDER BY id COLLATE "C"`,
		func(r pgx.Row) (*cluster.SandboxToken, error) {
			var t cluster.SandboxToken
			return &t, r.Scan(&t.SandboxID, &t.NodeID, &t.AccessToken)
		})
	if err != nil {
		return nil, err
	}
	out := make([]cluster.SandboxToken, len(ptrs))
	for i, t := range ptrs {
		out[i] = *t
	}
	return out, nil
}

// ReapLostNodes marks the nodes whose last heartbeat is older than bound
// as lost and moves their running sandboxes to lost_sandboxes, announcing
// each on RoutesChannel; paused sandboxes stay (their images are on the
// node's disk, or in the artifact store). It also forgets lost records
// older than a day. Everything happens in one transaction under a
// transaction advisory lock, so concurrent reapers never both mark a node:
// one that does not get the lock returns nil, nil at once rather than
// wait (the next round will do).
func (d *DB) ReapLostNodes(ctx context.Context, bound time.Duration) ([]cluster.Node, error) {
	if bound <= 0 {
		return nil, fmt.Errorf("reap lost nodes: bound %s must be positive", bound)
	}
	reason := fmt.Sprintf(" was lost: no heartbeat for %s", bound)
	var marked []cluster.Node
	err := d.run(ctx, func(ctx context.Context) error {
		marked = nil
		return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			var locked bool
			if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", reapLock).Scan(&locked); err != nil {
				return fmt.Errorf("taking the reaper lock: %w", err)
			}
			if !locked {
				return nil
			}
			rows, err := tx.Query(ctx, `UPDATE nodes SET state = 'lost', lost_at = now()
				WHERE state <> 'lost' AND heartbeat_at < now() - make_interval(secs => $1)
				RETURNING `+nodeColumns, bound.Seconds())
			if err != nil {
				return fmt.Errorf("marking nodes lost: %w", err)
			}
			ptrs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*cluster.Node, error) { return scanNode(r) })
			if err != nil {
				return fmt.Errorf("marking nodes lost: %w", err)
			}
			marked = derefNodes(ptrs)
			if len(marked) > 0 {
				ids := make([]string, len(marked))
				for i, n := range marked {
					ids[i] = n.ID
				}
				// With an event hook, each running sandbox that goes is
				// killed (its event in this transaction).
				if err := d.lostEvents(ctx, tx, ids); err != nil {
					return fmt.Errorf("recording the lost sandboxes' events: %w", err)
				}
				// The lost records, the deletes and the notifications
				// (delivered at commit) in one statement.
				if _, err := tx.Exec(ctx, `WITH gone AS (
						DELETE FROM sandboxes WHERE node_id = ANY($1) AND state = 'running' RETURNING id, node_id),
					recorded AS (
						INSERT INTO lost_sandboxes (sandbox_id, node_id, lost_at, reason)
						SELECT id, node_id, now(), 'node ' || node_id || $2 FROM gone
						ON CONFLICT (sandbox_id) DO UPDATE SET node_id = excluded.node_id,
							lost_at = excluded.lost_at, reason = excluded.reason)
					SELECT pg_notify($3, id) FROM gone`, ids, reason, RoutesChannel); err != nil {
					return fmt.Errorf("removing the lost nodes' sandboxes: %w", err)
				}
				// A resume cut short by the loss: paused again, so that another
				// node can take it (its image is still in the artifact store).
				if _, err := tx.Exec(ctx, "UPDATE sandboxes SET state = 'paused' WHERE node_id = ANY($1) AND state = 'resuming'", ids); err != nil {
					return fmt.Errorf("pausing the lost nodes' interrupted resumes: %w", err)
				}
			}
			if _, err := tx.Exec(ctx, "DELETE FROM lost_sandboxes WHERE lost_at < now() - make_interval(secs => $1)",
				lostRetention.Seconds()); err != nil {
				return fmt.Errorf("forgetting old lost sandboxes: %w", err)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("reap lost nodes: %w", err)
	}
	return marked, nil
}

// LostSandbox is the record of a sandbox ReapLostNodes removed (kept a
// day); cluster.ErrNotFound otherwise.
func (d *DB) LostSandbox(ctx context.Context, sandboxID string) (cluster.Lost, error) {
	var l cluster.Lost
	err := d.queryRow(ctx, func(r pgx.Row) error { return r.Scan(&l.SandboxID, &l.NodeID, &l.At, &l.Reason) },
		"SELECT sandbox_id, node_id, lost_at, reason FROM lost_sandboxes WHERE sandbox_id = $1", sandboxID)
	if errors.Is(err, pgx.ErrNoRows) {
		return cluster.Lost{}, fmt.Errorf("lost sandbox %s: %w", sandboxID, cluster.ErrNotFound)
	}
	if err != nil {
		return cluster.Lost{}, fmt.Errorf("lost sandbox %s: %w", sandboxID, err)
	}
	l.At = l.At.UTC()
	return l, nil
}

// WatchRoutes listens on RoutesChannel (Listen): each sandbox id sent
// becomes a RouteChange for it, and a reconnection of the listener a
// Resync. The channel closes when ctx ends or the DB is closed.
func (d *DB) WatchRoutes(ctx context.Context) (<-chan cluster.RouteChange, error) {
	in, err := d.Listen(ctx, RoutesChannel)
	if err != nil {
		return nil, fmt.Errorf("watch routes: %w", err)
	}
	out := make(chan cluster.RouteChange, cap(in))
	go func() {
		defer close(out)
		for n := range in {
			c := cluster.RouteChange{SandboxID: n.Payload, Resync: n.Resync}
			select {
			case out <- c:
			case <-ctx.Done():
				// in closes too (its listener shares ctx): drain it so
				// the listener never blocks on us.
				for range in {
				}
				return
			}
		}
	}()
	return out, nil
}
