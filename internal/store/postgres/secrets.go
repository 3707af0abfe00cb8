package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-sandbox/airlock/internal/store"
)

var _ store.SecretStore = (*DB)(nil)

const secretColumns = "id, name, version, sealed, metadata, created_at, updated_at"

// CreateSecret inserts s; store.ErrNameTaken when its name (or id) is
// used. Secrets have no node: every node of a cluster reads them all.
func (d *DB) CreateSecret(ctx context.Context, s *store.Secret) error {
	if s == nil || s.ID == "" || s.Name == "" {
		return errors.New("create secret: empty id or name")
	}
	md, err := encodeMap(s.Metadata)
	if err != nil {
		return fmt.Errorf("create secret %s: %w", s.Name, err)
	}
	tag, err := d.exec(ctx, `INSERT INTO secrets (`+secretColumns+`) VALUES ($1,$2,$3,$4,$5,$6,$7) ON CONFLICT DO NOTHING`,
		s.ID, s.Name, s.Version, s.Sealed, md, encodeTime(s.CreatedAt), encodeTime(s.UpdatedAt))
	if err != nil {
		return fmt.Errorf("create secret %s: %w", s.Name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("create secret %s: %w", s.Name, store.ErrNameTaken)
	}
	return nil
}

// GetSecret returns the secret with id or store.ErrNotFound.
func (d *DB) GetSecret(ctx context.Context, id string) (*store.Secret, error) {
	return d.getSecret(ctx, "id", id)
}

// GetSecretByName returns the secret named name or store.ErrNotFound.
func (d *DB) GetSecretByName(ctx context.Context, name string) (*store.Secret, error) {
	return d.getSecret(ctx, "name", name)
}

func scanSecret(r pgx.Row) (*store.Secret, error) {
	var (
		s                store.Secret
		md               string
		created, updated *time.Time
	)
	if err := r.Scan(&s.ID, &s.Name, &s.Version, &s.Sealed, &md, &created, &updated); err != nil {
		return nil, err
	}
	m, err := decodeMap(md)
	if err != nil {
		return nil, fmt.Errorf("secret %s metadata: %w", s.ID, err)
	}
	if len(m) == 0 {
		m = nil
	}
	s.Metadata, s.CreatedAt, s.UpdatedAt = m, decodeTime(created), decodeTime(updated)
	return &s, nil
}

// getSecret looks a secret up by column (a constant, never user input).
func (d *DB) getSecret(ctx context.Context, column, key string) (*store.Secret, error) {
	var s *store.Secret
	err := d.queryRow(ctx, func(r pgx.Row) error {
		var err error
		s, err = scanSecret(r)
		return err
	}, "SELECT "+secretColumns+" FROM secrets WHERE "+column+" = $1", key)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("secret %s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get secret %s: %w", key, err)
	}
	return s, nil
}

// ListSecrets returns every secret, oldest first.
func (d *DB) ListSecrets(ctx context.Context) ([]*store.Secret, error) {
	return list(ctx, d, "secrets", "SELECT "+secretColumns+" FROM secrets ORDER BY created_at NULLS FIRST, id", scanSecret)
}

// UpdateSecret stores s's value and metadata as version s.Version when the
// stored one is s.Version-1.
func (d *DB) UpdateSecret(ctx context.Context, s *store.Secret) error {
	if s == nil || s.ID == "" {
		return errors.New("update secret: empty id")
	}
	md, err := encodeMap(s.Metadata)
	if err != nil {
		return fmt.Errorf("update secret %s: %w", s.ID, err)
	}
	tag, err := d.exec(ctx, "UPDATE secrets SET version = $1, sealed = $2, metadata = $3, updated_at = $4 WHERE id = $5 AND version = $6",
		s.Version, s.Sealed, md, encodeTime(s.UpdatedAt), s.ID, s.Version-1)
	if err != nil {
		return fmt.Errorf("update secret %s: %w", s.ID, err)
	}
	if tag.RowsAffected() == 0 {
		if _, err := d.GetSecret(ctx, s.ID); err != nil {
			return err
		}
		return fmt.Errorf("update secret %s: %w", s.ID, store.ErrVersion)
	}
	return nil
}

// DeleteSecret removes the secret with id; store.ErrNotFound when none.
func (d *DB) DeleteSecret(ctx context.Context, id string) error {
	return d.deleteRow(ctx, "DELETE FROM secrets WHERE id = $1", "secret", id)
}
