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

// storeLeaseOptions are the PostgreSQL daemon lease's (the defaults: 10 s
// heartbeats, stale after 30 s); tests shorten them.
var storeLeaseOptions postgres.LeaseOptions

// openStore opens the store --store names: "" is SQLite in
// <dataDir>/airlock.db (the single-host default), a postgres:// or
// postgresql:// URL is PostgreSQL, scoped to node nodeID ("" for --role
// all), whose daemon lease it takes (a second daemon of the same node is
// refused). It also returns a description for logs,
// without any password.
func openStore(ctx context.Context, spec, nodeID, dataDir string, log *slog.Logger) (store.Full, string, error) {
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
	st, err := postgres.OpenWith(ctx, spec, postgres.Options{NodeID: nodeID}, log.With("component", "store"))
	if err != nil {
		return nil, "", fmt.Errorf("opening store (--store): %w", err)
	}
	// One daemon per node id (and one --role all daemon per database): a
	// second one would take the first's sandboxes for its own at restore
	// and remove them. The lease is released when the store is closed.
	if _, err := st.AcquireLease(ctx, storeLeaseOptions); err != nil {
		st.Close()
		return nil, "", fmt.Errorf("opening store (--store): %s: %w", st, err)
	}
	return st, st.String(), nil
}

// storeLeaseLost is closed when another daemon took the store's daemon
// lease, and lost then says why (wrapping store.ErrLeaseLost). It is nil
// for SQLite, which has no lease: the data-dir lock (internal/daemonlock)
// already keeps a second daemon off its database file.
func storeLeaseLost(st store.Full) (done <-chan struct{}, lost func() error) {
	if db, ok := st.(*postgres.DB); ok {
		if l := db.Lease(); l != nil {
			return l.Lost(), l.Err
		}
	}
	return nil, nil
}
