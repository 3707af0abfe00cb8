package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
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
	octx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	defer cancel()
	st, err := postgres.OpenWith(octx, spec, postgres.Options{NodeID: nodeID}, log.With("component", "store"))
	if err != nil {
		return nil, "", fmt.Errorf("opening store (--store): %w", err)
	}
	// One daemon per node id (and one --role all daemon per database): a
	// second one would take the first's sandboxes for its own at restore
	// and remove them. The lease is released when the store is closed.
	if err := acquireLease(ctx, st, nodeID, log); err != nil {
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

// acquireLease takes the store's daemon lease. A cluster node that finds its
// node id's lease held from this very host by a process that no longer
// exists takes it over at once (its predecessor, killed before it could
// release it); held by a live process of this host it waits for it to go
// stale (at most the lease's bound, 30 s; a process of another PID
// namespace may look alive). A holder on another host is a second node
// with the same id, refused at once.
func acquireLease(ctx context.Context, st *postgres.DB, nodeID string, log *slog.Logger) error {
	host, _ := os.Hostname()
	deadline := time.Now().Add(leaseWait())
	waiting := false
	for {
		actx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
		_, err := st.AcquireLease(actx, storeLeaseOptions)
		cancel()
		var held *postgres.LeaseHeldError
		if err == nil || nodeID == "" || !errors.As(err, &held) || held.Holder.Hostname != host || time.Now().After(deadline) {
			return err
		}
		// Its process is gone from this host: take the lease now rather than
		// wait out the bound, during which the api tier would mark the node
		// lost and report its running sandboxes gone (found in review).
		if !processAlive(held.Holder.PID) {
			log.Warn("the previous daemon of this node is gone without releasing its lease; taking it",
				"node", nodeID, "pid", held.Holder.PID, "last_seen", held.Holder.LastSeen.Round(time.Second))
			if err := st.BreakLease(ctx, held.Holder); err != nil {
				return err
			}
			continue
		}
		if !waiting {
			log.Warn("the previous daemon of this node still holds its lease (it did not stop cleanly); waiting for it to go stale",
				"node", nodeID, "pid", held.Holder.PID, "last_seen", held.Holder.LastSeen.Round(time.Second))
			waiting = true
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(2 * time.Second):
		}
	}
}

// leaseWait is how long a node waits for its previous daemon's lease: the
// staleness bound and a margin.
func leaseWait() time.Duration {
	stale := storeLeaseOptions.StaleAfter
	if stale <= 0 {
		stale = postgres.DefaultLeaseStaleAfter
	}
	return stale + 5*time.Second
}

// processAlive reports whether a process with this pid exists here (EPERM:
// it does, as another user's).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
