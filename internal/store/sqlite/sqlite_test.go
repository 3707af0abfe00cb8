package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
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

func sampleSandbox(id string, started time.Time) *store.Sandbox {
	return &store.Sandbox{
		ID:            id,
		TemplateID:    "base",
		TemplateHash:  "sha256abc",
		Alias:         "base",
		State:         "running",
		Runtime:       "gvisor",
		Slot:          7,
		GuestIP:       "10.77.0.30",
		AccessToken:   "tok-" + id,
		TrafficToken:  "",
		Metadata:      map[string]string{"owner": "alice", "unicode": "héllo \"q\" =&"},
		EnvVars:       map[string]string{"FOO": "bar"},
		AllowInternet: true,
		CPUCount:      2,
		MemoryMB:      512,
		DiskSizeMB:    1024,
		StartedAt:     started,
		EndAt:         started.Add(300 * time.Second),
		OnTimeout:     "kill",
		Extra:         `{"pid":42}`,
	}
}

func TestSandboxCRUD(t *testing.T) {
	ctx := context.Background()
	db, _ := openTemp(t)

	// A non-UTC time with nanoseconds must come back as the same instant in UTC.
	loc := time.FixedZone("X", 5*3600+30*60)
	started := time.Date(2026, 11, 22, 10, 11, 12, 123456789, loc)
	want := sampleSandbox("iabc", started)
	if err := db.PutSandbox(ctx, want); err != nil {
		t.Fatalf("PutSandbox: %v", err)
	}
	got, err := db.GetSandbox(ctx, "iabc")
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if !got.StartedAt.Equal(started) || got.StartedAt.Location() != time.UTC {
		t.Fatalf("StartedAt = %v, want %v in UTC", got.StartedAt, started)
	}
	if got.StartedAt.Nanosecond() != 123456789 {
		t.Fatalf("nanoseconds lost: %d", got.StartedAt.Nanosecond())
	}
	want.StartedAt = started.UTC()
	want.EndAt = want.EndAt.UTC()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip mismatch:\n got %+v\nwant %+v", got, want)
	}

	// Replace (upsert) changes fields in place.
	want.State = "paused"
	want.Metadata = map[string]string{"k": "v"}
	want.EnvVars = nil
	want.AllowInternet = false
	want.EndAt = time.Time{}
	if err := db.PutSandbox(ctx, want); err != nil {
		t.Fatalf("PutSandbox (replace): %v", err)
	}
	got, err = db.GetSandbox(ctx, "iabc")
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after replace:\n got %+v\nwant %+v", got, want)
	}
	if !got.EndAt.IsZero() || got.EnvVars != nil {
		t.Fatalf("zero time / nil map did not round trip: %v %v", got.EndAt, got.EnvVars)
	}

	// List is ordered by start time.
	early := sampleSandbox("iearly", started.Add(-time.Hour))
	if err := db.PutSandbox(ctx, early); err != nil {
		t.Fatalf("PutSandbox: %v", err)
	}
	list, err := db.ListSandboxes(ctx)
	if err != nil {
		t.Fatalf("ListSandboxes: %v", err)
	}
	if len(list) != 2 || list[0].ID != "iearly" || list[1].ID != "iabc" {
		t.Fatalf("ListSandboxes = %v, want [iearly iabc]", ids(list))
	}

	if err := db.DeleteSandbox(ctx, "iabc"); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	if _, err := db.GetSandbox(ctx, "iabc"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSandbox after delete: err = %v, want ErrNotFound", err)
	}
	if err := db.DeleteSandbox(ctx, "iabc"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteSandbox twice: err = %v, want ErrNotFound", err)
	}
	if err := db.PutSandbox(ctx, &store.Sandbox{}); err == nil {
		t.Fatal("PutSandbox with empty id succeeded")
	}
}

func ids(l []*store.Sandbox) []string {
	var out []string
	for _, s := range l {
		out = append(out, s.ID)
	}
	return out
}

func TestTemplateCRUD(t *testing.T) {
	ctx := context.Background()
	db, _ := openTemp(t)
	created := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	base := &store.Template{Name: "base", Hash: "h1", Runtime: "", SizeBytes: 1 << 33, CreatedAt: created, Spec: `{"suite":"bookworm"}`}
	ci := &store.Template{Name: "code-interpreter-v1", Hash: "h2", Runtime: "gvisor", SizeBytes: 5, CreatedAt: created.Add(time.Minute)}
	for _, tp := range []*store.Template{base, ci} {
		if err := db.PutTemplate(ctx, tp); err != nil {
			t.Fatalf("PutTemplate(%s): %v", tp.Name, err)
		}
	}
	got, err := db.GetTemplate(ctx, "base")
	if err != nil {
		t.Fatalf("GetTemplate: %v", err)
	}
	if !reflect.DeepEqual(got, base) {
		t.Fatalf("GetTemplate:\n got %+v\nwant %+v", got, base)
	}
	base.Hash = "h3"
	if err := db.PutTemplate(ctx, base); err != nil {
		t.Fatalf("PutTemplate (replace): %v", err)
	}
	list, err := db.ListTemplates(ctx)
	if err != nil {
		t.Fatalf("ListTemplates: %v", err)
	}
	if len(list) != 2 || list[0].Name != "base" || list[0].Hash != "h3" || list[1].Name != "code-interpreter-v1" {
		t.Fatalf("ListTemplates = %+v", list)
	}
	if err := db.DeleteTemplate(ctx, "base"); err != nil {
		t.Fatalf("DeleteTemplate: %v", err)
	}
	if _, err := db.GetTemplate(ctx, "base"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetTemplate after delete: %v, want ErrNotFound", err)
	}
	if err := db.DeleteTemplate(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteTemplate(missing): %v, want ErrNotFound", err)
	}
}

func TestSettings(t *testing.T) {
	ctx := context.Background()
	db, _ := openTemp(t)
	if _, err := db.GetSetting(ctx, "api_key"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSetting(missing) = %v, want ErrNotFound", err)
	}
	for _, v := range []string{"e2b_1", "e2b_2"} {
		if err := db.PutSetting(ctx, "api_key", v); err != nil {
			t.Fatalf("PutSetting: %v", err)
		}
		got, err := db.GetSetting(ctx, "api_key")
		if err != nil || got != v {
			t.Fatalf("GetSetting = %q, %v; want %q", got, err, v)
		}
	}
	v, err := db.GetSetting(ctx, SchemaVersionKey)
	if err != nil || v != fmt.Sprint(len(migrations)) {
		t.Fatalf("schema_version setting = %q, %v; want %d", v, err, len(migrations))
	}
}

func TestReopenPersistsAndWAL(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "airlock.db")
	db, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := db.PutSandbox(ctx, sampleSandbox("ipersist", time.Now())); err != nil {
		t.Fatalf("PutSandbox: %v", err)
	}
	if err := db.PutSetting(ctx, "api_key", "e2b_ff"); err != nil {
		t.Fatalf("PutSetting: %v", err)
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
	s, err := db2.GetSandbox(ctx, "ipersist")
	if err != nil || s.AccessToken != "tok-ipersist" || s.Metadata["owner"] != "alice" {
		t.Fatalf("after reopen GetSandbox = %+v, %v", s, err)
	}
	if v, err := db2.GetSetting(ctx, "api_key"); err != nil || v != "e2b_ff" {
		t.Fatalf("after reopen GetSetting = %q, %v", v, err)
	}
	ver, err := db2.SchemaVersion(ctx)
	if err != nil || ver != len(migrations) {
		t.Fatalf("SchemaVersion = %d, %v; want %d", ver, err, len(migrations))
	}
	var applied int
	if err := db2.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&applied); err != nil || applied != len(migrations) {
		t.Fatalf("schema_migrations rows = %d, %v; migrations must not re-run on reopen", applied, err)
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

func TestConcurrentWriters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, path := openTemp(t)
	// A second handle on the same file behaves like a second process.
	db2, err := Open(path)
	if err != nil {
		t.Fatalf("second Open: %v", err)
	}
	defer db2.Close()

	const workers, perWorker = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			h := db
			if w%2 == 1 {
				h = db2
			}
			for i := 0; i < perWorker; i++ {
				id := fmt.Sprintf("iw%di%d", w, i)
				if err := h.PutSandbox(ctx, sampleSandbox(id, time.Now())); err != nil {
					errs <- err
					return
				}
				if err := h.PutSetting(ctx, fmt.Sprintf("w%d", w), fmt.Sprint(i)); err != nil {
					errs <- err
					return
				}
				if _, err := h.GetSandbox(ctx, id); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent write failed: %v", err)
	}
	list, err := db.ListSandboxes(ctx)
	if err != nil {
		t.Fatalf("ListSandboxes: %v", err)
	}
	if len(list) != workers*perWorker {
		t.Fatalf("got %d sandboxes, want %d", len(list), workers*perWorker)
	}
	for w := 0; w < workers; w++ {
		v, err := db2.GetSetting(ctx, fmt.Sprintf("w%d", w))
		if err != nil || v != fmt.Sprint(perWorker-1) {
			t.Fatalf("setting w%d = %q, %v", w, v, err)
		}
	}
}
