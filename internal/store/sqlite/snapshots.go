package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/store"
)

var _ store.SnapshotStore = (*DB)(nil)

const snapshotColumns = "id, name, sandbox_id, size_bytes, created_at, spec"

// PutSnapshot inserts or replaces a snapshot row (keyed by id).
func (d *DB) PutSnapshot(ctx context.Context, s *store.Snapshot) error {
	if s == nil || s.ID == "" {
		return errors.New("put snapshot: empty id")
	}
	if h := d.eventHook(); h != nil {
		return d.putSnapshotEvents(ctx, s, h)
	}
	return putSnapshot(ctx, d.db, s)
}

func putSnapshot(ctx context.Context, db execer, s *store.Snapshot) error {
	_, err := db.ExecContext(ctx, `INSERT INTO snapshots (`+snapshotColumns+`) VALUES (?,?,?,?,?,?)
		ON CONFLICT(id) DO UPDATE SET name=excluded.name, sandbox_id=excluded.sandbox_id,
		size_bytes=excluded.size_bytes, created_at=excluded.created_at, spec=excluded.spec`,
		s.ID, s.Name, s.SandboxID, s.SizeBytes, encodeTime(s.CreatedAt), s.Spec)
	if err != nil {
		return fmt.Errorf("put snapshot %s: %w", s.ID, err)
	}
	return nil
}

func scanSnapshot(r scanner) (*store.Snapshot, error) {
	var (
		s       store.Snapshot
		created int64
	)
	if err := r.Scan(&s.ID, &s.Name, &s.SandboxID, &s.SizeBytes, &created, &s.Spec); err != nil {
		return nil, err
	}
	s.CreatedAt = decodeTime(created)
	return &s, nil
}

// GetSnapshot returns one snapshot or store.ErrNotFound.
func (d *DB) GetSnapshot(ctx context.Context, id string) (*store.Snapshot, error) {
	row := d.db.QueryRowContext(ctx, "SELECT "+snapshotColumns+" FROM snapshots WHERE id = ?", id)
	s, err := scanSnapshot(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("snapshot %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get snapshot %s: %w", id, err)
	}
	return s, nil
}

// ListSnapshots returns all snapshots, oldest first.
func (d *DB) ListSnapshots(ctx context.Context) ([]*store.Snapshot, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT "+snapshotColumns+" FROM snapshots ORDER BY created_at, id")
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	defer rows.Close()
	var out []*store.Snapshot
	for rows.Next() {
		s, err := scanSnapshot(rows)
		if err != nil {
			return nil, fmt.Errorf("list snapshots: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return out, nil
}

// DeleteSnapshot removes a snapshot; store.ErrNotFound if it did not exist.
func (d *DB) DeleteSnapshot(ctx context.Context, id string) error {
	return d.deleteRow(ctx, "DELETE FROM snapshots WHERE id = ?", "snapshot", id)
}
