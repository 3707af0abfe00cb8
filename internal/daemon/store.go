package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/postgres"
	"github.com/airlock-sandbox/airlock/internal/store/sqlite"
)

// storeOpenTimeout bounds connecting to (and migrating) a PostgreSQL store
// at start.
const storeOpenTimeout = 60 * time.Second

// openStore opens the store --store names: "" is SQLite in
// <dataDir>/airlock.db (the single-host default), a postgres:// or
// postgresql:// URL is PostgreSQL. It also returns a description for logs,
// without any password.
func openStore(ctx context.Context, spec, dataDir string, log *slog.Logger) (store.Full, string, error) {
	if spec == "" {
		path := filepath.Join(dataDir, "airlock.db")
		st, err := sqlite.OpenContext(ctx, path)
		if err != nil {
			return nil, "", fmt.Errorf("opening store: %w", err)
		}
		return st, "sqlite " + path, nil
	}
	u, err := url.Parse(spec)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// Not echoed: it may hold a password.
		return nil, "", fmt.Errorf("invalid --store: want a postgres://user:password@host:port/database URL (or nothing, for SQLite in the data directory)")
	}
	ctx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	defer cancel()
	st, err := postgres.Open(ctx, spec, log.With("component", "store"))
	if err != nil {
		return nil, "", fmt.Errorf("opening store (--store): %w", err)
	}
	return st, st.String(), nil
}
