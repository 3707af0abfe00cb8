package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/store"
)

var _ store.TemplateBuildStore = (*DB)(nil)

const buildColumns = "id, template_id, status, created_at, updated_at, spec, logs"

// PutTemplateBuild inserts or replaces a template build row (keyed by id).
func (d *DB) PutTemplateBuild(ctx context.Context, b *store.TemplateBuild) error {
	if b == nil || b.ID == "" {
		return errors.New("put template build: empty id")
	}
	_, err := d.db.ExecContext(ctx, `INSERT INTO template_builds (`+buildColumns+`) VALUES (?,?,?,?,?,?,?)
		ON CONFLICT(id) DO UPDATE SET template_id=excluded.template_id, status=excluded.status,
		created_at=excluded.created_at, updated_at=excluded.updated_at, spec=excluded.spec, logs=excluded.logs`,
		b.ID, b.TemplateID, b.Status, encodeTime(b.CreatedAt), encodeTime(b.UpdatedAt), b.Spec, b.Logs)
	if err != nil {
		return fmt.Errorf("put template build %s: %w", b.ID, err)
	}
	return nil
}

// GetTemplateBuild returns one template build or store.ErrNotFound.
func (d *DB) GetTemplateBuild(ctx context.Context, id string) (*store.TemplateBuild, error) {
	var (
		b                store.TemplateBuild
		created, updated int64
	)
	err := d.db.QueryRowContext(ctx, "SELECT "+buildColumns+" FROM template_builds WHERE id = ?", id).
		Scan(&b.ID, &b.TemplateID, &b.Status, &created, &updated, &b.Spec, &b.Logs)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("template build %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get template build %s: %w", id, err)
	}
	b.CreatedAt, b.UpdatedAt = decodeTime(created), decodeTime(updated)
	return &b, nil
}

// ListTemplateBuilds returns the builds of templateID, newest first, at
// most limit, without their logs.
func (d *DB) ListTemplateBuilds(ctx context.Context, templateID string, limit int) ([]*store.TemplateBuild, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT id, template_id, status, created_at, updated_at, spec FROM template_builds
		WHERE template_id = ? ORDER BY created_at DESC, id DESC LIMIT ?`, templateID, limit)
	if err != nil {
		return nil, fmt.Errorf("list template builds of %s: %w", templateID, err)
	}
	defer rows.Close()
	var out []*store.TemplateBuild
	for rows.Next() {
		var (
			b                store.TemplateBuild
			created, updated int64
		)
		if err := rows.Scan(&b.ID, &b.TemplateID, &b.Status, &created, &updated, &b.Spec); err != nil {
			return nil, fmt.Errorf("list template builds of %s: %w", templateID, err)
		}
		b.CreatedAt, b.UpdatedAt = decodeTime(created), decodeTime(updated)
		out = append(out, &b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list template builds of %s: %w", templateID, err)
	}
	return out, nil
}
