package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-sandbox/airlock/internal/startup"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/postgres"
	"github.com/airlock-sandbox/airlock/internal/store/postgres/pgtest"
	"github.com/airlock-sandbox/airlock/internal/store/sqlite"
)

func testStoreLogger(*testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func TestOpenStoreDefaultIsSQLiteInTheDataDir(t *testing.T) {
	dir := t.TempDir()
	st, where, err := openStore(context.Background(), "", "", dir, testStoreLogger(t))
	if err != nil {
		t.Fatalf("openStore: %v", err)
	}
	defer st.Close()
	if _, ok := st.(*sqlite.DB); !ok {
		t.Fatalf("default store is %T, want *sqlite.DB", st)
	}
	if _, err := os.Stat(filepath.Join(dir, "airlock.db")); err != nil || !strings.Contains(where, "airlock.db") {
		t.Fatalf("default store %q: %v", where, err)
	}
}

func TestOpenStoreRefusesOtherURLsWithoutShowingThem(t *testing.T) {
	for _, spec := range []string{"mysql://u:s3cret@h/db", "/var/lib/x.db", "sqlite://x"} {
		st, _, err := openStore(context.Background(), spec, "", t.TempDir(), testStoreLogger(t))
		if err == nil {
			st.Close()
			t.Fatalf("openStore(%q) succeeded", spec)
		}
		if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "--store") {
			t.Fatalf("openStore(%q): %v; want an error naming --store, without the value", spec, err)
		}
	}
}

// TestStoreWiringOnPostgres opens --store postgres://… as the daemon does:
// a second daemon on the database is refused while the first runs, and
// starts at once after it stopped, on the records the first left (the API
// key, SDK builds), with its own data dir.
func TestStoreWiringOnPostgres(t *testing.T) {
	t.Setenv("AIRLOCK_API_KEY", "")
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	open := func() store.Full {
		st, where, err := openStore(ctx, url, "", t.TempDir(), testStoreLogger(t))
		if err != nil {
			t.Fatalf("openStore: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		if _, ok := st.(*postgres.DB); !ok {
			t.Fatalf("store for a postgres URL is %T", st)
		}
		u, _ := neturl.Parse(url)
		pw, _ := u.User.Password()
		if !strings.HasPrefix(where, "postgres postgres@127.0.0.1:") || pw == "" || strings.Contains(where, pw) {
			t.Fatalf("store described as %q: want user@host:port/db without the password", where)
		}
		return st
	}
	st1 := open()
	dir1, dir2 := t.TempDir(), t.TempDir()
	key1, err := startup.APIKey(ctx, "", dir1, st1)
	if err != nil {
		t.Fatalf("startup.APIKey: %v", err)
	}
	builds := newSDKBuildStore(st1, dir1)
	b := &store.TemplateBuild{ID: "b1", TemplateID: "app", Status: "building", CreatedAt: time.Now()}
	if err := builds.PutTemplateBuild(ctx, b); err != nil {
		t.Fatalf("PutTemplateBuild: %v", err)
	}

	// A second daemon on the same database is refused, naming the first.
	host, _ := os.Hostname()
	st, _, err := openStore(ctx, url, "", t.TempDir(), testStoreLogger(t))
	if err == nil {
		st.Close()
		t.Fatal("a second daemon's store opened on a database in use")
	}
	var held *postgres.LeaseHeldError
	want := fmt.Sprintf("database already used by the airlock daemon on host %s (pid %d), last seen ", host, os.Getpid())
	if !errors.As(err, &held) || !strings.Contains(err.Error(), want) ||
		!strings.HasSuffix(err.Error(), "one single-host daemon per database (several hosts share one as cluster nodes: --role node)") || !strings.Contains(err.Error(), "--store") {
		t.Fatalf("second openStore: %v; want %q…", err, want)
	}

	// The first stops (closing its store releases the lease): the next
	// starts at once.
	st1.Close()
	st2 := open()
	key2, err := startup.APIKey(ctx, "", dir2, st2)
	if err != nil || key2 != key1 {
		t.Fatalf("next daemon's API key = %q, %v; want the one the first stored, %q", key2, err, key1)
	}
	if got, err := newSDKBuildStore(st2, dir2).GetTemplateBuild(ctx, "b1"); err != nil || got.Status != "building" {
		t.Fatalf("GetTemplateBuild through the next daemon = %+v, %v", got, err)
	}
}

// TestStoreLeaseLostStopsTheDaemon: when another daemon took the lease,
// the daemon's context is cancelled with the reason, and its store refuses
// to act.
func TestStoreLeaseLostStopsTheDaemon(t *testing.T) {
	old := storeLeaseOptions
	storeLeaseOptions = postgres.LeaseOptions{StaleAfter: 2 * time.Second, Heartbeat: 100 * time.Millisecond}
	t.Cleanup(func() { storeLeaseOptions = old })
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	st, _, err := openStore(ctx, url, "", t.TempDir(), testStoreLogger(t))
	if err != nil {
		t.Fatalf("openStore: %v", err)
	}
	defer st.Close()
	if lostc, _ := storeLeaseLost(st); lostc == nil {
		t.Fatal("no lease on a PostgreSQL store")
	}
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	d := &daemon{log: testStoreLogger(t), st: st, stop: stop}
	d.watchStoreLease(runCtx)

	// Another daemon takes the lease (as after this one was cut off from
	// the database for longer than the bound).
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "UPDATE daemon_lease SET owner = 'other', hostname = 'host-b', pid = 7, heartbeat_at = now()"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-runCtx.Done():
	case <-ctx.Done():
		t.Fatal("the daemon's context was not cancelled after its lease was taken")
	}
	if cause := context.Cause(runCtx); !errors.Is(cause, store.ErrLeaseLost) || !strings.Contains(cause.Error(), "host-b") {
		t.Fatalf("cancelled with %v; want store.ErrLeaseLost naming host-b", cause)
	}
	if err := st.PutSetting(ctx, "k", "v"); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("PutSetting after the lease was lost: %v", err)
	}
	// Closing does not release the other daemon's lease.
	st.Close()
	var owner string
	if err := conn.QueryRow(ctx, "SELECT owner FROM daemon_lease").Scan(&owner); err != nil || owner != "other" {
		t.Fatalf("lease owner after close = %q, %v; want the other daemon's", owner, err)
	}
}

func TestSQLiteStoreHasNoLease(t *testing.T) {
	st, _, err := openStore(context.Background(), "", "", t.TempDir(), testStoreLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if lostc, lost := storeLeaseLost(st); lostc != nil || lost != nil {
		t.Fatal("SQLite store reports a lease")
	}
}

// TestNodeTakesItsPredecessorsLease: a node restarted after a crash finds
// its previous daemon's lease: held by a process of this host that is gone,
// it takes it at once; held by a live process of this host, it waits for it
// to go stale; held from another host (a second node with the same id), it
// is refused at once.
func TestNodeTakesItsPredecessorsLease(t *testing.T) {
	old := storeLeaseOptions
	storeLeaseOptions = postgres.LeaseOptions{StaleAfter: 3 * time.Second, Heartbeat: 500 * time.Millisecond}
	t.Cleanup(func() { storeLeaseOptions = old })
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, _, err := openStore(ctx, url, "n1", t.TempDir(), testStoreLogger(t))
	if err != nil {
		t.Fatalf("openStore: %v", err)
	}
	st.Close() // releases the row; put back one as a killed daemon leaves it
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	host, _ := os.Hostname()
	leave := func(h string, pid int) {
		t.Helper()
		if _, err := conn.Exec(ctx, `INSERT INTO daemon_lease (node_id, owner, hostname, pid, started_at, heartbeat_at)
			VALUES ('n1', 'dead', $1, $2, now(), now()) ON CONFLICT (node_id) DO UPDATE SET owner = 'dead', hostname = $1, pid = $2, heartbeat_at = now()`, h, pid); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name       string
		pid        int
		fast, slow bool
	}{
		{name: "gone", pid: 999999, fast: true},
		{name: "alive (pid 1)", pid: 1, slow: true},
	} {
		leave(host, tc.pid)
		start := time.Now()
		st2, _, err := openStore(ctx, url, "n1", t.TempDir(), testStoreLogger(t))
		if err != nil {
			t.Fatalf("%s: openStore after a crash: %v", tc.name, err)
		}
		took := time.Since(start)
		st2.Close()
		if tc.fast && took > time.Second {
			t.Errorf("%s: took the lease after %s; want at once", tc.name, took)
		}
		if tc.slow && took < 2*time.Second {
			t.Errorf("%s: took the lease after %s, before it went stale", tc.name, took)
		}
	}

	leave("another-host", 999999)
	if st3, _, err := openStore(ctx, url, "n1", t.TempDir(), testStoreLogger(t)); err == nil {
		st3.Close()
		t.Fatal("a node id held from another host was taken")
	} else if !strings.Contains(err.Error(), "node id n1 already used by the airlock daemon on host another-host") {
		t.Fatalf("err = %v", err)
	}
}
