package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-sandbox/airlock/internal/store"
)

const buildColumns = "id, template_id, status, created_at, updated_at, spec, logs"

// PutTemplateBuild inserts or replaces a template build row (keyed by id),
// as this node's.
func (d *DB) PutTemplateBuild(ctx context.Context, b *store.TemplateBuild) error {
	if b == nil || b.ID == "" {
		return errors.New("put template build: empty id")
	}
	_, err := d.exec(ctx, `INSERT INTO template_builds (`+buildColumns+`, node_id) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)
		ON CONFLICT (id) DO UPDATE SET node_id=excluded.node_id, template_id=excluded.template_id, status=excluded.status,
		created_at=excluded.created_at, updated_at=excluded.updated_at, spec=excluded.spec, logs=excluded.logs`,
		b.ID, b.TemplateID, b.Status, encodeTime(b.CreatedAt), encodeTime(b.UpdatedAt), b.Spec, b.Logs, d.nodeID)
	if err != nil {
		return fmt.Errorf("put template build %s: %w", b.ID, err)
	}
	return nil
}

// GetTemplateBuild returns one of this node's template builds or
// store.ErrNotFound.
func (d *DB) GetTemplateBuild(ctx context.Context, id string) (*store.TemplateBuild, error) {
	var (
		b                store.TemplateBuild
		created, updated *time.Time
	)
	err := d.queryRow(ctx, func(r pgx.Row) error {
		return r.Scan(&b.ID, &b.TemplateID, &b.Status, &created, &updated, &b.Spec, &b.Logs)
	}, "SELECT "+buildColumns+" FROM template_builds WHERE id = $1 AND node_id = $2", id, d.nodeID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("template build %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get template build %s: %w", id, err)
	}
	b.CreatedAt, b.UpdatedAt = decodeTime(created), decodeTime(updated)
	return &b, nil
}

// ListTemplateBuilds returns this node's builds of templateID, newest
// first, at most limit, without their logs.
func (d *DB) ListTemplateBuilds(ctx context.Context, templateID string, limit int) ([]*store.TemplateBuild, error) {
	return list(ctx, d, "template builds of "+templateID, `SELECT id, template_id, status, created_at, updated_at, spec
		FROM template_builds WHERE template_id = $1 AND node_id = $3 ORDER BY created_at DESC NULLS LAST, id DESC LIMIT $2`,
		func(r pgx.Row) (*store.TemplateBuild, error) {
			var (
				b                store.TemplateBuild
				created, updated *time.Time
			)
			if err := r.Scan(&b.ID, &b.TemplateID, &b.Status, &created, &updated, &b.Spec); err != nil {
				return nil, err
			}
			b.CreatedAt, b.UpdatedAt = decodeTime(created), decodeTime(updated)
			return &b, nil
		}, templateID, limit, d.nodeID)
}
