package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Moving sandboxes and snapshots between nodes (store.Mover, and the api
// tier's cluster.Store.SandboxRoute).

var _ store.Mover = (*DB)(nil)

// ClaimSandbox makes the paused sandbox id this node's with state, only
// while its row is on node from, paused, with an image: the row is locked
// (SELECT … FOR UPDATE), checked, then updated in one transaction, so of
// two claims one wins. A row that changes node is announced on
// RoutesChannel (at commit) and loses its slot and address.
func (d *DB) ClaimSandbox(ctx context.Context, id, from, state string, check func(*store.Sandbox) error) (*store.Sandbox, error) {
	var (
		got     *store.Sandbox
		refused error
	)
	err := d.run(ctx, func(ctx context.Context) error {
		got, refused = nil, nil
		return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			var node string
			s, err := scanSandboxNode(tx.QueryRow(ctx, "SELECT "+sandboxColumns+", node_id FROM sandboxes WHERE id = $1 FOR UPDATE", id), &node)
			if errors.Is(err, pgx.ErrNoRows) {
				refused = fmt.Errorf("sandbox %s: %w", id, store.ErrNotFound)
				return nil
			}
			if err != nil {
				return err
			}
			if node != from || s.State != "paused" || !strings.Contains(s.Extra, `"image":"`) {
				refused = fmt.Errorf("sandbox %s is %s on node %s, not paused with an image on %s: %w", id, s.State, node, from, store.ErrMoved)
				return nil
			}
			if check != nil {
				if refused = check(s); refused != nil {
					return nil
				}
			}
			got, err = scanSandbox(tx.QueryRow(ctx, `UPDATE sandboxes SET node_id = $2, state = $3,
				slot = CASE WHEN $2 = $4 THEN slot ELSE -1 END,
				guest_ip = CASE WHEN $2 = $4 THEN guest_ip ELSE '' END
				WHERE id = $1 RETURNING `+sandboxColumns, id, d.nodeID, state, from))
			if err != nil {
				return err
			}
			if from != d.nodeID {
				if _, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", RoutesChannel, id); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("claim sandbox %s: %w", id, err)
	}
	if refused != nil {
		return nil, refused
	}
	return got, nil
}

// ClearSnapshotName removes name from every node's snapshots.
func (d *DB) ClearSnapshotName(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	if _, err := d.exec(ctx, "UPDATE snapshots SET name = '' WHERE name = $1", name); err != nil {
		return fmt.Errorf("clearing snapshot name %s: %w", name, err)
	}
	return nil
}

// AnySnapshot is a snapshot of any node: by id, else the newest with that
// name (the order of SnapshotNode).
func (d *DB) AnySnapshot(ctx context.Context, idOrName string) (*store.Snapshot, string, error) {
	var (
		s    *store.Snapshot
		node string
	)
	err := d.queryRow(ctx, func(r pgx.Row) error {
		var err error
		s, node, err = scanSnapshotNode(r)
		return err
	}, "SELECT "+snapshotColumns+`, node_id FROM snapshots
		WHERE id = $1 OR (name = $1 AND name <> '')
		ORDER BY id = $1 DESC, created_at DESC NULLS LAST, id DESC LIMIT 1`, idOrName)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", fmt.Errorf("snapshot %s: %w", idOrName, store.ErrNotFound)
	}
	if err != nil {
		return nil, "", fmt.Errorf("get snapshot %s: %w", idOrName, err)
	}
	return s, node, nil
}

func scanSnapshotNode(r pgx.Row) (*store.Snapshot, string, error) {
	var (
		s       store.Snapshot
		node    string
		created *time.Time
	)
	if err := r.Scan(&s.ID, &s.Name, &s.SandboxID, &s.SizeBytes, &created, &s.Spec, &node); err != nil {
		return nil, "", err
	}
	s.CreatedAt = decodeTime(created)
	return &s, node, nil
}

// SandboxRoute is a sandbox's node and what the api tier needs to move it
// (cluster.Route).
func (d *DB) SandboxRoute(ctx context.Context, id string) (cluster.Route, error) {
	var (
		rt    cluster.Route
		extra string
	)
	err := d.queryRow(ctx, func(r pgx.Row) error {
		return r.Scan(&rt.NodeID, &rt.State, &rt.TemplateID, &rt.CPUCount, &rt.MemoryMB, &extra)
	}, "SELECT node_id, state, template_id, cpu_count, memory_mb, extra FROM sandboxes WHERE id = $1", id)
	if errors.Is(err, pgx.ErrNoRows) {
		return rt, fmt.Errorf("sandbox %s: %w", id, cluster.ErrNotFound)
	}
	if err != nil {
		return rt, fmt.Errorf("route of sandbox %s: %w", id, err)
	}
	if extra != "" {
		var x struct {
			Image        string            `json:"image"`
			Evacuated    bool              `json:"evacuated"`
			Uploading    bool              `json:"uploading"`
			AutoResume   bool              `json:"autoResume"`
			BaseTemplate string            `json:"baseTemplate"`
			Volumes      []json.RawMessage `json:"volumes"`
		}
		if json.Unmarshal([]byte(extra), &x) == nil {
			rt.Movable = rt.State == "paused" && x.Image != ""
			rt.Evacuated = x.Evacuated
			rt.Uploading = rt.State == "paused" && x.Uploading
			rt.AutoResume = x.AutoResume
			rt.Volumes = len(x.Volumes) > 0
			if x.BaseTemplate != "" {
				rt.TemplateID = x.BaseTemplate
			}
		}
	}
	return rt, nil
}
