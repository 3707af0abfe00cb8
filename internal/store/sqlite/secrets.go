package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/store"
)

var _ store.SecretStore = (*DB)(nil)

const secretColumns = "id, name, version, sealed, metadata, created_at, updated_at"

// CreateSecret inserts s; store.ErrNameTaken when its name (or id) is used.
func (d *DB) CreateSecret(ctx context.Context, s *store.Secret) error {
	if s == nil || s.ID == "" || s.Name == "" {
		return errors.New("create secret: empty id or name")
	}
	md, err := encodeMap(s.Metadata)
	if err != nil {
		return fmt.Errorf("create secret %s: %w", s.Name, err)
	}
	res, err := d.db.ExecContext(ctx, `INSERT INTO secrets (`+secretColumns+`) VALUES (?,?,?,?,?,?,?) ON CONFLICT DO NOTHING`,
		s.ID, s.Name, s.Version, s.Sealed, md, encodeTime(s.CreatedAt), encodeTime(s.UpdatedAt))
	if err != nil {
		return fmt.Errorf("create secret %s: %w", s.Name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("create secret %s: %w", s.Name, err)
	} else if n == 0 {
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

type rowScanner interface{ Scan(...any) error }

func scanSecret(r rowScanner) (*store.Secret, error) {
	var (
		s                store.Secret
		md               string
		created, updated int64
	)
	if err := r.Scan(&s.ID, &s.Name, &s.Version, &s.Sealed, &md, &created, &updated); err != nil {
		return nil, err
	}
	m, err := decodeMap(md)
	if err != nil {
		return nil, fmt.Errorf("secret %s metadata: %w", s.ID, err)
	}
	s.Metadata, s.CreatedAt, s.UpdatedAt = m, decodeTime(created), decodeTime(updated)
	return &s, nil
}

// getSecret looks a secret up by column (a constant, never user input).
func (d *DB) getSecret(ctx context.Context, column, key string) (*store.Secret, error) {
	s, err := scanSecret(d.db.QueryRowContext(ctx, "SELECT "+secretColumns+" FROM secrets WHERE "+column+" = ?", key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("secret %s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get secret %s: %w", key, err)
	}
	return s, nil
}

// ListSecrets returns every secret, oldest first.
func (d *DB) ListSecrets(ctx context.Context) ([]*store.Secret, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT "+secretColumns+" FROM secrets ORDER BY created_at, id")
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	var out []*store.Secret
	for rows.Next() {
		s, err := scanSecret(rows)
		if err != nil {
			return nil, fmt.Errorf("list secrets: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return out, nil
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
	res, err := d.db.ExecContext(ctx, "UPDATE secrets SET version = ?, sealed = ?, metadata = ?, updated_at = ? WHERE id = ? AND version = ?",
		s.Version, s.Sealed, md, encodeTime(s.UpdatedAt), s.ID, s.Version-1)
	if err != nil {
		return fmt.Errorf("update secret %s: %w", s.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("update secret %s: %w", s.ID, err)
	} else if n == 0 {
		if _, err := d.GetSecret(ctx, s.ID); err != nil {
			return err
		}
		return fmt.Errorf("update secret %s: %w", s.ID, store.ErrVersion)
	}
	return nil
}

// DeleteSecret removes the secret with id; store.ErrNotFound when none.
func (d *DB) DeleteSecret(ctx context.Context, id string) error {
	res, err := d.db.ExecContext(ctx, "DELETE FROM secrets WHERE id = ?", id)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("delete secret %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("secret %s: %w", id, store.ErrNotFound)
	}
	return nil
}
