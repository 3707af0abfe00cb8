package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// What the artifact store's garbage collection (internal/artifactgc) needs
// from the database: the rows that reference objects, read across every
// node whatever the DB's scope, and a lock so that one instance of the
// cluster collects at a time.

// artifactGCLock is the session advisory lock key of the artifact store's
// collection ("Airlock3" in ASCII; migrationLock is "Airlock1", reapLock
// "Airlock2").
const artifactGCLock int64 = 0x4169726c6f636b33

// TemplateHashes returns the hash of every template row (templates are
// shared by all nodes).
func (d *DB) TemplateHashes(ctx context.Context) ([]string, error) {
	return d.textColumn(ctx, "template hashes", "SELECT DISTINCT hash FROM templates WHERE hash <> ''")
}

// PausedSandboxes returns the extra document of every sandbox row of any
// node that is not running — paused, or resuming: a resume claims its row
// before it fetches the image — by sandbox id.
func (d *DB) PausedSandboxes(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	err := d.run(ctx, func(ctx context.Context) error {
		clear(out)
		rows, err := d.pool.Query(ctx, "SELECT id, extra FROM sandboxes WHERE state <> 'running'")
		if err != nil {
			return err
		}
		var id, extra string
		_, err = pgx.ForEachRow(rows, []any{&id, &extra}, func() error {
			out[id] = extra
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing paused sandboxes: %w", err)
	}
	return out, nil
}

// SnapshotIDs returns the id of every snapshot row of any node.
func (d *DB) SnapshotIDs(ctx context.Context) ([]string, error) {
	return d.textColumn(ctx, "snapshot ids", "SELECT id FROM snapshots")
}

// AgentBlobs returns the agent builds ("agentBlob" in a sandbox row's extra
// or a snapshot row's spec) that any row of any node records, whatever its
// state: a running sandbox's earlier pause uploaded it, and its next pause
// records it again without uploading it.
func (d *DB) AgentBlobs(ctx context.Context) ([]string, error) {
	docs, err := d.textColumn(ctx, "agent builds",
		`SELECT extra FROM sandboxes WHERE extra LIKE '%"agentBlob"%' UNION ALL SELECT spec FROM snapshots WHERE spec LIKE '%"agentBlob"%'`)
	if err != nil {
		return nil, err
	}
	return agentBlobs(docs), nil
}

// agentBlobs returns the distinct "agentBlob" values of the JSON documents
// docs. A document that cannot be parsed yields its raw text, which is no
// digest, so the collection keeps every blob (what cannot be judged is kept).
func agentBlobs(docs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, doc := range docs {
		var x struct {
			AgentBlob string `json:"agentBlob"`
		}
		v := doc
		if err := json.Unmarshal([]byte(doc), &x); err == nil {
			v = x.AgentBlob
		}
		if v != "" && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// textColumn runs a query of one text column through run.
func (d *DB) textColumn(ctx context.Context, what, query string) ([]string, error) {
	var out []string
	err := d.run(ctx, func(ctx context.Context) error {
		rows, err := d.pool.Query(ctx, query)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	return out, nil
}

// TryArtifactGCLock takes the artifact collection's lock unless another
// session holds it (held false, at once). The lock is a session advisory
// lock on a connection taken from the pool for as long as it is held:
// release unlocks it and returns the connection. If the connection or the
// instance dies first, PostgreSQL ends the session and the lock with it,
// so another instance collects next time.
func (d *DB) TryArtifactGCLock(ctx context.Context) (release func(), held bool, err error) {
	var conn *pgxpool.Conn
	err = d.run(ctx, func(ctx context.Context) error {
		c, err := d.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		var ok bool
		if err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", artifactGCLock).Scan(&ok); err != nil {
			c.Release()
			return err
		}
		if !ok {
			c.Release()
			return nil
		}
		conn = c
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("taking the artifact gc lock: %w", err)
	}
	if conn == nil {
		return nil, false, nil
	}
	return func() { d.releaseArtifactGCLock(conn) }, true, nil
}

// releaseArtifactGCLock unlocks and returns conn to the pool. A connection
// that cannot unlock is closed instead, which ends the session and its
// lock, so the pool never hands out a connection still holding it.
func (d *DB) releaseArtifactGCLock(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var unlocked bool
	err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", artifactGCLock).Scan(&unlocked)
	if err != nil || !unlocked {
		d.log.Warn("releasing the artifact gc lock failed; closing its connection", "unlocked", unlocked, "err", err)
		_ = conn.Conn().Close(ctx)
	}
	conn.Release()
}
