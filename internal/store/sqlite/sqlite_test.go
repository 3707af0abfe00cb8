package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/storetest"
)

func openTemp(t *testing.T) (*DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "airlock.db")
	db, err := Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

// TestConformance runs the store suite shared with the PostgreSQL backend.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		path := filepath.Join(t.TempDir(), "airlock.db")
		return func(t *testing.T) store.Full {
			db, err := Open(path)
			if err != nil {
				t.Fatalf("Open(%s): %v", path, err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}
	})
}

func TestSchemaVersionKey(t *testing.T) {
	if SchemaVersionKey != storetest.SchemaVersionKey {
		t.Fatalf("SchemaVersionKey = %q, the suite reads %q", SchemaVersionKey, storetest.SchemaVersionKey)
	}
}

func TestWALAndMigrationsOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "airlock.db")
	db, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	var mode string
	if err := db.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
	var fk int
	if err := db.db.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil || fk != 1 {
		t.Fatalf("foreign_keys = %d, %v; want 1", fk, err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	db2, err := Open(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer db2.Close()
	ver, err := db2.SchemaVersion(ctx)
	if err != nil || ver != len(migrations) {
		t.Fatalf("SchemaVersion = %d, %v; want %d", ver, err, len(migrations))
	}
	var applied int
	if err := db2.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&applied); err != nil || applied != len(migrations) {
		t.Fatalf("schema_migrations rows = %d, %v; migrations must not re-run on reopen", applied, err)
	}
	if v, err := db2.GetSetting(ctx, SchemaVersionKey); err != nil || v != fmt.Sprint(len(migrations)) {
		t.Fatalf("schema_version setting = %q, %v; want %d", v, err, len(migrations))
	}
}

func TestMigrationsApplyInOrderAndOnlyOnce(t *testing.T) {
	ctx := context.Background()
	db, _ := openTemp(t)
	extra := append(append([]migration{}, migrations...),
		migration{name: "add widgets", sql: "CREATE TABLE widgets (id INTEGER PRIMARY KEY)"},
		migration{name: "seed widgets", sql: "INSERT INTO widgets (id) VALUES (1), (2)"},
	)
	if err := db.applyMigrations(ctx, extra); err != nil {
		t.Fatalf("applyMigrations: %v", err)
	}
	// Running again must not re-apply (a second seed would violate the primary key).
	if err := db.applyMigrations(ctx, extra); err != nil {
		t.Fatalf("applyMigrations again: %v", err)
	}
	ver, _ := db.SchemaVersion(ctx)
	if ver != len(extra) {
		t.Fatalf("SchemaVersion = %d, want %d", ver, len(extra))
	}
	// A binary with fewer migrations than the database must refuse to run.
	if err := db.applyMigrations(ctx, migrations); err == nil {
		t.Fatal("older migration list accepted a newer database")
	}
	// A failing migration rolls back and leaves the version unchanged.
	bad := append(append([]migration{}, extra...), migration{name: "broken", sql: "CREATE TABLE widgets (x)"})
	if err := db.applyMigrations(ctx, bad); err == nil {
		t.Fatal("broken migration succeeded")
	}
	if v, _ := db.SchemaVersion(ctx); v != len(extra) {
		t.Fatalf("SchemaVersion after failure = %d, want %d", v, len(extra))
	}
}
