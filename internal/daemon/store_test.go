package daemon

import (
	"context"
	"log/slog"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	st, where, err := openStore(context.Background(), "", dir, testStoreLogger(t))
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
		st, _, err := openStore(context.Background(), spec, t.TempDir(), testStoreLogger(t))
		if err == nil {
			st.Close()
			t.Fatalf("openStore(%q) succeeded", spec)
		}
		if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "--store") {
			t.Fatalf("openStore(%q): %v; want an error naming --store, without the value", spec, err)
		}
	}
}

// TestStoreWiringOnPostgres opens --store postgres://… as the daemon does
// and runs what the daemon builds on the store before serving: the API key
// (shared by two daemons with their own data dirs) and the SDK build store.
func TestStoreWiringOnPostgres(t *testing.T) {
	t.Setenv("AIRLOCK_API_KEY", "")
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	open := func() store.Full {
		st, where, err := openStore(ctx, url, t.TempDir(), testStoreLogger(t))
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
	st1, st2 := open(), open()
	dir1, dir2 := t.TempDir(), t.TempDir()
	key1, err := resolveAPIKey(ctx, "", dir1, st1)
	if err != nil {
		t.Fatalf("resolveAPIKey: %v", err)
	}
	key2, err := resolveAPIKey(ctx, "", dir2, st2)
	if err != nil || key2 != key1 {
		t.Fatalf("second daemon's API key = %q, %v; want the one the first stored, %q", key2, err, key1)
	}

	builds := newSDKBuildStore(st1, dir1)
	b := &store.TemplateBuild{ID: "b1", TemplateID: "app", Status: "building", CreatedAt: time.Now()}
	if err := builds.PutTemplateBuild(ctx, b); err != nil {
		t.Fatalf("PutTemplateBuild: %v", err)
	}
	if got, err := newSDKBuildStore(st2, dir2).GetTemplateBuild(ctx, "b1"); err != nil || got.Status != "building" {
		t.Fatalf("GetTemplateBuild through the other daemon = %+v, %v", got, err)
	}
}
