package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-sandbox/airlock/internal/store"
)

const snapshotColumns = "id, name, sandbox_id, size_bytes, created_at, spec"

// PutSnapshot inserts or replaces a snapshot row (keyed by id), as this
// node's.
func (d *DB) PutSnapshot(ctx context.Context, s *store.Snapshot) error {
	if s == nil || s.ID == "" {
		return errors.New("put snapshot: empty id")
	}
	if h := d.eventHook(); h != nil {
		return d.putSnapshotEvents(ctx, s, h)
	}
	_, err := d.exec(ctx, putSnapshotSQL, s.ID, s.Name, s.SandboxID, s.SizeBytes, encodeTime(s.CreatedAt), s.Spec, d.nodeID)
	if err != nil {
		return fmt.Errorf("put snapshot %s: %w", s.ID, err)
	}
	return nil
}

const putSnapshotSQL = `INSERT INTO snapshots (` + snapshotColumns + `, node_id) VALUES ($1,$2,$3,$4,$5,$6,$7)
		ON CONFLICT (id) DO UPDATE SET node_id=excluded.node_id, name=excluded.name, sandbox_id=excluded.sandbox_id,
		size_bytes=excluded.size_bytes, created_at=excluded.created_at, spec=excluded.spec`

func scanSnapshot(r pgx.Row) (*store.Snapshot, error) {
	var (
		s       store.Snapshot
		created *time.Time
	)
	if err := r.Scan(&s.ID, &s.Name, &s.SandboxID, &s.SizeBytes, &created, &s.Spec); err != nil {
		return nil, err
	}
	s.CreatedAt = decodeTime(created)
	return &s, nil
}

// GetSnapshot returns one of this node's snapshots or store.ErrNotFound.
func (d *DB) GetSnapshot(ctx context.Context, id string) (*store.Snapshot, error) {
	var s *store.Snapshot
	err := d.queryRow(ctx, func(r pgx.Row) (err error) {
		s, err = scanSnapshot(r)
		return err
	}, "SELECT "+snapshotColumns+" FROM snapshots WHERE id = $1 AND node_id = $2", id, d.nodeID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("snapshot %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get snapshot %s: %w", id, err)
	}
	return s, nil
}

// ListSnapshots returns this node's snapshots, oldest first (created, id).
func (d *DB) ListSnapshots(ctx context.Context) ([]*store.Snapshot, error) {
	return list(ctx, d, "snapshots", "SELECT "+snapshotColumns+
		" FROM snapshots WHERE node_id = $1 ORDER BY created_at NULLS FIRST, id", scanSnapshot, d.nodeID)
}

// DeleteSnapshot removes one of this node's snapshots; store.ErrNotFound if
// it did not exist.
func (d *DB) DeleteSnapshot(ctx context.Context, id string) error {
	return d.deleteRow(ctx, "DELETE FROM snapshots WHERE id = $1 AND node_id = $2", "snapshot", id, d.nodeID)
}
