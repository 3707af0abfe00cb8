package sqlite

import (
	"context"
	"fmt"
	"strings"
)

// maxBatchDelete bounds the ids of one DELETE statement (SQLite's limit
// on bound parameters is 32766 in current builds; far fewer are ever
// queued at once).
const maxBatchDelete = 500

// DeleteSandboxes removes the sandboxes ids in one statement per
// maxBatchDelete ids (one write transaction, one wait for the writer
// lock); ids without a row are no error. The sandbox manager deletes the
// rows of parallel kills this way, in the background.
func (d *DB) DeleteSandboxes(ctx context.Context, ids []string) error {
	if h := d.eventHook(); h != nil {
		_, err := d.deleteSandboxesEvents(ctx, ids, h)
		return err
	}
	for len(ids) > 0 {
		n := min(len(ids), maxBatchDelete)
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		q := "DELETE FROM sandboxes WHERE id IN (?" + strings.Repeat(",?", n-1) + ")"
		if _, err := d.db.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("delete %d sandboxes: %w", n, err)
		}
		ids = ids[n:]
	}
	return nil
}
