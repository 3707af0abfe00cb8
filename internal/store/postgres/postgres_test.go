package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/postgres/pgtest"
	"github.com/airlock-sandbox/airlock/internal/store/storetest"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func openDB(t *testing.T, url string) *DB {
	t.Helper()
	db, err := Open(ctxFor(t, 60*time.Second), url, testLogger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestConformance runs the store suite shared with the SQLite backend on a
// real server, one fresh database per test.
func TestConformance(t *testing.T) {
	srv := pgtest.Start(t)
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		url := srv.NewDatabase(t)
		return func(t *testing.T) store.Full { return openDB(t, url) }
	})
}

func TestSchemaVersionKey(t *testing.T) {
	if SchemaVersionKey != storetest.SchemaVersionKey {
		t.Fatalf("SchemaVersionKey = %q, the suite reads %q", SchemaVersionKey, storetest.SchemaVersionKey)
	}
}

func TestMigrations(t *testing.T) {
	srv := pgtest.Start(t)

	// Daemons starting together on an empty database: each Open succeeds
	// and the migrations ran once.
	t.Run("ConcurrentOpensMigrateOnce", func(t *testing.T) {
		url := srv.NewDatabase(t)
		const n = 6
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				db, err := Open(ctxFor(t, 60*time.Second), url, testLogger(t))
				if err == nil {
					db.Close()
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("concurrent Open: %v", err)
		}
		db := openDB(t, url)
		var rows int
		if err := db.pool.QueryRow(ctxFor(t, 10*time.Second), "SELECT count(*) FROM schema_migrations").Scan(&rows); err != nil || rows != len(migrations) {
			t.Fatalf("schema_migrations has %d rows (%v), want %d: a migration ran twice or not at all", rows, err, len(migrations))
		}
	})

	// Open waits for the advisory lock another session holds.
	t.Run("OpenWaitsForTheLock", func(t *testing.T) {
		url := srv.NewDatabase(t)
		ctx := ctxFor(t, 60*time.Second)
		holder, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close(ctx)
		if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLock); err != nil {
			t.Fatal(err)
		}
		opened := make(chan error, 1)
		go func() {
			db, err := Open(ctx, url, testLogger(t))
			if err == nil {
				db.Close()
			}
			opened <- err
		}()
		select {
		case err := <-opened:
			t.Fatalf("Open returned (%v) while another session held the migration lock", err)
		case <-time.After(500 * time.Millisecond):
		}
		if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", migrationLock); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-opened:
			if err != nil {
				t.Fatalf("Open after the lock was released: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Open still waiting 20s after the lock was released")
		}
	})

	t.Run("InOrderOnlyOnceAndRollback", func(t *testing.T) {
		ctx := ctxFor(t, 60*time.Second)
		db := openDB(t, srv.NewDatabase(t))
		extra := append(append([]migration{}, migrations...),
			migration{name: "add widgets", sql: "CREATE TABLE widgets (id integer PRIMARY KEY)"},
			migration{name: "seed widgets", sql: "INSERT INTO widgets (id) VALUES (1), (2)"},
		)
		if err := db.migrateTo(ctx, extra); err != nil {
			t.Fatalf("migrateTo: %v", err)
		}
		// Running again must not re-apply (a second seed would violate the primary key).
		if err := db.migrateTo(ctx, extra); err != nil {
			t.Fatalf("migrateTo again: %v", err)
		}
		if v, err := db.SchemaVersion(ctx); err != nil || v != len(extra) {
			t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, len(extra))
		}
		if v, err := db.GetSetting(ctx, SchemaVersionKey); err != nil || v != fmt.Sprint(len(extra)) {
			t.Fatalf("%s setting = %q, %v; want %d", SchemaVersionKey, v, err, len(extra))
		}
		// A binary with fewer migrations than the database refuses to run.
		if err := db.migrateTo(ctx, migrations); err == nil || !strings.Contains(err.Error(), "newer than this binary") {
			t.Fatalf("older migration list on a newer database: %v", err)
		}
		// A failing migration rolls back and leaves the version unchanged.
		bad := append(append([]migration{}, extra...),
			migration{name: "half broken", sql: "CREATE TABLE gadgets (id integer); CREATE TABLE widgets (x integer)"})
		if err := db.migrateTo(ctx, bad); err == nil {
			t.Fatal("broken migration succeeded")
		}
		if v, _ := db.SchemaVersion(ctx); v != len(extra) {
			t.Fatalf("SchemaVersion after failure = %d, want %d", v, len(extra))
		}
		var gadgets *string
		if err := db.pool.QueryRow(ctx, "SELECT to_regclass('gadgets')::text").Scan(&gadgets); err != nil || gadgets != nil {
			t.Fatalf("the failed migration's first statement was kept (gadgets = %v, %v)", gadgets, err)
		}
		// The lock was released each time: another session can take it.
		var got bool
		if err := db.pool.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", migrationLock).Scan(&got); err != nil || !got {
			t.Fatalf("migration lock still held after migrating (%v)", err)
		}
	})
}

// TestOpenErrors: clear errors that never show the password.
func TestOpenErrors(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	for _, url := range []string{
		"postgres://u:s3cret-pw@127.0.0.1:1/db?sslmode=disable&connect_timeout=5", // nothing listens on port 1
		"postgres://u:s3cret-pw@127.0.0.1:notaport/db",
	} {
		db, err := Open(ctx, url, testLogger(t))
		if err == nil {
			db.Close()
			t.Fatalf("Open(%s) succeeded", url)
		}
		if strings.Contains(err.Error(), "s3cret-pw") {
			t.Fatalf("Open error shows the password: %v", err)
		}
		t.Logf("Open: %v", err)
	}
}

// TestReconnectAfterServerRestart is the "Postgres restarted" fault: the
// pool's connections die with the server, and the store works again once
// the server is back, with its data.
func TestReconnectAfterServerRestart(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := ctxFor(t, 90*time.Second)
	db := openDB(t, srv.NewDatabase(t))
	if err := db.PutSandbox(ctx, storetest.SampleSandbox("ibefore", time.Now())); err != nil {
		t.Fatal(err)
	}
	// Several pooled connections, so more than one goes stale.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = db.ListSandboxes(ctx)
		}()
	}
	wg.Wait()

	srv.Restart(t)

	// Every pooled connection died with the server. The first call to meet
	// one resets the pool and runs again: callers see no error, also when
	// several meet dead connections at once.
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- db.PutSandbox(ctx, storetest.SampleSandbox(fmt.Sprintf("iafter%d", i), time.Now()))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("PutSandbox after the server restarted: %v", err)
		}
	}
	list, err := db.ListSandboxes(ctx)
	if err != nil || len(list) != 9 {
		t.Fatalf("ListSandboxes after reconnecting = %d rows, %v; want ibefore and 8 more", len(list), err)
	}

	// While the server is down, calls fail with the reason; once it is
	// back, they work again.
	srv.Stop(t)
	if _, err := db.GetSandbox(ctx, "ibefore"); err == nil {
		t.Fatal("GetSandbox succeeded with the server stopped")
	} else {
		t.Logf("while stopped: %v", err)
	}
	srv.Restart(t)
	if _, err := db.GetSandbox(ctx, "ibefore"); err != nil {
		t.Fatalf("GetSandbox after the server came back: %v", err)
	}
}

func TestListenNotify(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := ctxFor(t, 90*time.Second)
	url := srv.NewDatabase(t)
	listener, sender := openDB(t, url), openDB(t, url)

	routes, err := listener.Listen(ctx, "airlock.routes")
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	other, err := listener.Listen(ctx, "other")
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	expect := func(ch <-chan Notification, want Notification) {
		t.Helper()
		select {
		case n, ok := <-ch:
			if !ok || n != want {
				t.Fatalf("got %+v (open %v), want %+v", n, ok, want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("no notification in 15s, want %+v", want)
		}
	}
	for _, p := range []string{"isb1", "isb2", "", "ü ' \" ;"} {
		if err := sender.Notify(ctx, "airlock.routes", p); err != nil {
			t.Fatalf("Notify: %v", err)
		}
	}
	for _, p := range []string{"isb1", "isb2", "", "ü ' \" ;"} {
		expect(routes, Notification{Payload: p})
	}
	if err := sender.Notify(ctx, "other", "x"); err != nil {
		t.Fatal(err)
	}
	expect(other, Notification{Payload: "x"})
	select {
	case n := <-routes:
		t.Fatalf("notification on another channel delivered here: %+v", n)
	default:
	}

	// The server restarts: the listener reconnects, says so, and receives
	// again.
	srv.Restart(t)
	expect(routes, Notification{Resync: true})
	expect(other, Notification{Resync: true})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err = sender.Notify(ctx, "airlock.routes", "isb3"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Notify still failing 15s after the restart: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	expect(routes, Notification{Payload: "isb3"})

	// Ending the context closes the channel; Close ends the other listener.
	lctx, cancel := context.WithCancel(ctx)
	short, err := listener.Listen(lctx, "short")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, ok := <-short; ok {
		t.Fatal("listener channel still open after its context ended")
	}
	listener.Close()
	for range routes {
	}
	for range other {
	}
	if _, err := listener.Listen(ctx, "late"); err == nil {
		t.Fatal("Listen on a closed store succeeded")
	}
}
