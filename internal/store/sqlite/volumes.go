package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/store"
)

var _ store.VolumeStore = (*DB)(nil)

const volumeColumns = "id, name, size_bytes, created_at, bucket"

// CreateVolume inserts v; store.ErrNameTaken when its name (or id) is used.
func (d *DB) CreateVolume(ctx context.Context, v *store.Volume) error {
	if v == nil || v.ID == "" || v.Name == "" {
		return errors.New("create volume: empty id or name")
	}
	res, err := d.db.ExecContext(ctx, `INSERT INTO volumes (`+volumeColumns+`) VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING`,
		v.ID, v.Name, v.SizeBytes, encodeTime(v.CreatedAt), v.Bucket)
	if err != nil {
		return fmt.Errorf("create volume %s: %w", v.Name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("create volume %s: %w", v.Name, err)
	} else if n == 0 {
		return fmt.Errorf("create volume %s: %w", v.Name, store.ErrNameTaken)
	}
	return nil
}

// GetVolume returns the volume with id or store.ErrNotFound.
func (d *DB) GetVolume(ctx context.Context, id string) (*store.Volume, error) {
	return d.getVolume(ctx, "id", id)
}

// GetVolumeByName returns the volume named name or store.ErrNotFound.
func (d *DB) GetVolumeByName(ctx context.Context, name string) (*store.Volume, error) {
	return d.getVolume(ctx, "name", name)
}

// getVolume looks a volume up by column (a constant, never user input).
func (d *DB) getVolume(ctx context.Context, column, key string) (*store.Volume, error) {
	var (
		v       store.Volume
		created int64
	)
	err := d.db.QueryRowContext(ctx, "SELECT "+volumeColumns+" FROM volumes WHERE "+column+" = ?", key).
		Scan(&v.ID, &v.Name, &v.SizeBytes, &created, &v.Bucket)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("volume %s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get volume %s: %w", key, err)
	}
	v.CreatedAt = decodeTime(created)
	return &v, nil
}

// ListVolumes returns every volume, oldest first.
func (d *DB) ListVolumes(ctx context.Context) ([]*store.Volume, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT "+volumeColumns+" FROM volumes ORDER BY created_at, id")
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	defer rows.Close()
	var out []*store.Volume
	for rows.Next() {
		var (
			v       store.Volume
			created int64
		)
		if err := rows.Scan(&v.ID, &v.Name, &v.SizeBytes, &created, &v.Bucket); err != nil {
			return nil, fmt.Errorf("list volumes: %w", err)
		}
		v.CreatedAt = decodeTime(created)
		out = append(out, &v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	return out, nil
}

// DeleteVolume removes the volume with id; store.ErrNotFound when none.
func (d *DB) DeleteVolume(ctx context.Context, id string) error {
	res, err := d.db.ExecContext(ctx, "DELETE FROM volumes WHERE id = ?", id)
	if err != nil {
		return fmt.Errorf("delete volume %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("delete volume %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("volume %s: %w", id, store.ErrNotFound)
	}
	return nil
}
