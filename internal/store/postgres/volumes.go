package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-sandbox/airlock/internal/store"
)

var _ store.VolumeStore = (*DB)(nil)

const volumeColumns = "id, name, size_bytes, created_at, bucket"

// CreateVolume inserts v; store.ErrNameTaken when its name (or id) is
// used. Volumes have no node: every node of a cluster sees them all.
func (d *DB) CreateVolume(ctx context.Context, v *store.Volume) error {
	if v == nil || v.ID == "" || v.Name == "" {
		return errors.New("create volume: empty id or name")
	}
	tag, err := d.exec(ctx, `INSERT INTO volumes (`+volumeColumns+`) VALUES ($1,$2,$3,$4,$5) ON CONFLICT DO NOTHING`,
		v.ID, v.Name, v.SizeBytes, encodeTime(v.CreatedAt), v.Bucket)
	if err != nil {
		return fmt.Errorf("create volume %s: %w", v.Name, err)
	}
	if tag.RowsAffected() == 0 {
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
		created *time.Time
	)
	err := d.queryRow(ctx, func(r pgx.Row) error {
		return r.Scan(&v.ID, &v.Name, &v.SizeBytes, &created, &v.Bucket)
	}, "SELECT "+volumeColumns+" FROM volumes WHERE "+column+" = $1", key)
	if errors.Is(err, pgx.ErrNoRows) {
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
	return list(ctx, d, "volumes", "SELECT "+volumeColumns+" FROM volumes ORDER BY created_at NULLS FIRST, id",
		func(r pgx.Row) (*store.Volume, error) {
			var (
				v       store.Volume
				created *time.Time
			)
			if err := r.Scan(&v.ID, &v.Name, &v.SizeBytes, &created, &v.Bucket); err != nil {
				return nil, err
			}
			v.CreatedAt = decodeTime(created)
			return &v, nil
		})
}

// DeleteVolume removes the volume with id; store.ErrNotFound when none.
func (d *DB) DeleteVolume(ctx context.Context, id string) error {
	return d.deleteRow(ctx, "DELETE FROM volumes WHERE id = $1", "volume", id)
}
