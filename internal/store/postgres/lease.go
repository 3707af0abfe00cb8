package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// The daemon lease keeps a second daemon of the same node off a database
// (it would take the first's sandboxes for its own at restore and remove
// them). It is one row in daemon_lease per node id ("" for --role all,
// which is also the row a lease taken before the cluster schema became):
// the holder's random owner id, host, pid, start and last heartbeat.
// Daemons of different nodes each hold their own row and coexist. Every
// time in it, and the staleness check, are the server's clock (now()),
// never a daemon's.
//
// A daemon takes the lease when there is none or the holder's heartbeat is
// older than StaleAfter; else AcquireLease fails with a *LeaseHeldError
// naming the holder. The holder heartbeats every Heartbeat through the
// reconnecting pool, so a server restart costs a failed (logged, retried)
// heartbeat, not the lease. When a heartbeat finds the row gone or owned
// by another daemon, the lease is lost: Lost is closed and the DB refuses
// every operation with an error wrapping store.ErrLeaseLost, so the daemon
// shuts down instead of fighting over the database. Close deletes the row
// (only its own), so the next daemon starts at once.
//
// Fencing without the server's help: a holder that could not confirm its
// lease for StaleAfter-Heartbeat (the server or the network was away)
// refuses operations (ErrLeaseUnconfirmed) until a heartbeat confirms it,
// so its writes stop before another daemon can take the lease over.

// Lease defaults.
const (
	DefaultLeaseStaleAfter = 30 * time.Second
	DefaultLeaseHeartbeat  = 10 * time.Second
)

// ErrLeaseUnconfirmed is returned by the operations of a DB whose lease
// was not confirmed recently enough (see the comment above).
var ErrLeaseUnconfirmed = errors.New("daemon lease not confirmed recently (database unreachable?); refusing until a heartbeat confirms it")

// LeaseOptions are the lease's holder details and timing; zero fields get
// the defaults.
type LeaseOptions struct {
	Hostname   string        // default os.Hostname()
	PID        int           // default os.Getpid()
	StaleAfter time.Duration // default DefaultLeaseStaleAfter
	Heartbeat  time.Duration // default DefaultLeaseHeartbeat; at most StaleAfter/2
}

// LeaseHolder is the lease row as another daemon sees it.
type LeaseHolder struct {
	NodeID    string // the node whose lease it is ("" for --role all)
	Hostname  string
	PID       int
	StartedAt time.Time
	// LastSeen is how long ago the holder's last heartbeat was, on the
	// server's clock.
	LastSeen time.Duration
}

// LeaseHeldError says another daemon holds the lease.
type LeaseHeldError struct{ Holder LeaseHolder }

func (e *LeaseHeldError) Error() string {
	if e.Holder.NodeID != "" {
		return fmt.Sprintf("node id %s already used by the airlock daemon on host %s (pid %d), last seen %s ago; "+
			"one daemon per node id", e.Holder.NodeID, e.Holder.Hostname, e.Holder.PID, formatAgo(e.Holder.LastSeen))
	}
	return fmt.Sprintf("database already used by the airlock daemon on host %s (pid %d), last seen %s ago; "+
		"one single-host daemon per database (several hosts share one as cluster nodes: --role node)", e.Holder.Hostname, e.Holder.PID, formatAgo(e.Holder.LastSeen))
}

func formatAgo(d time.Duration) string {
	if d < time.Second {
		return "less than 1 s"
	}
	return fmt.Sprintf("%d s", int64(d/time.Second))
}

// Lease is a held daemon lease; the DB releases it on Close.
type Lease struct {
	d     *DB
	owner string
	opts  LeaseOptions

	// base anchors confirmed (monotonic): confirmed is when (since base)
	// the statement that last confirmed the lease was sent.
	base      time.Time
	confirmed atomic.Int64

	lostOnce sync.Once
	lost     chan struct{}
	err      atomic.Pointer[error]

	stop    chan struct{}
	stopped chan struct{}
}

// AcquireLease takes the daemon lease of the DB's node (Options.NodeID)
// for this process and heartbeats it until the DB is closed. A DB holds at
// most one lease.
func (d *DB) AcquireLease(ctx context.Context, opts LeaseOptions) (*Lease, error) {
	if opts.Hostname == "" {
		h, err := os.Hostname()
		if err != nil {
			h = "unknown"
		}
		opts.Hostname = h
	}
	if opts.PID == 0 {
		opts.PID = os.Getpid()
	}
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = DefaultLeaseStaleAfter
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultLeaseHeartbeat
	}
	if 2*opts.Heartbeat > opts.StaleAfter {
		return nil, fmt.Errorf("daemon lease: heartbeat %s must be at most half the staleness bound %s", opts.Heartbeat, opts.StaleAfter)
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("daemon lease: owner id: %w", err)
	}
	l := &Lease{d: d, owner: hex.EncodeToString(b), opts: opts, base: time.Now(),
		lost: make(chan struct{}), stop: make(chan struct{}), stopped: make(chan struct{})}

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("daemon lease: store closed")
	}
	if d.lease.Load() != nil {
		return nil, errors.New("daemon lease: already held by this store")
	}
	// The holder may release between our insert and our read of it: try
	// again then.
	for attempt := 0; ; attempt++ {
		sent := time.Since(l.base)
		var got bool
		err := d.retry(ctx, func(ctx context.Context) error {
			// ON CONFLICT DO UPDATE locks the existing row and checks WHERE
			// on its latest version: of daemons starting together, one wins.
			var owner string
			err := d.pool.QueryRow(ctx, `INSERT INTO daemon_lease (node_id, owner, hostname, pid, started_at, heartbeat_at)
				VALUES ($5, $1, $2, $3, now(), now())
				ON CONFLICT (node_id) DO UPDATE SET owner = excluded.owner, hostname = excluded.hostname,
					pid = excluded.pid, started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at
				WHERE daemon_lease.heartbeat_at < now() - make_interval(secs => $4)
				RETURNING owner`, l.owner, opts.Hostname, opts.PID, opts.StaleAfter.Seconds(), d.nodeID).Scan(&owner)
			if errors.Is(err, pgx.ErrNoRows) {
				got = false
				return nil
			}
			got = err == nil
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("taking the daemon lease: %w", err)
		}
		if got {
			l.confirmed.Store(int64(sent))
			break
		}
		h, err := d.leaseHolder(ctx)
		if errors.Is(err, pgx.ErrNoRows) && attempt < 3 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the daemon lease: %w", err)
		}
		return nil, &LeaseHeldError{Holder: h}
	}
	d.lease.Store(l)
	go l.loop()
	d.log.Info("daemon lease taken", "db", d.where, "node", d.nodeID, "host", opts.Hostname, "pid", opts.PID)
	return l, nil
}

// leaseHolder reads the lease row of the DB's node.
func (d *DB) leaseHolder(ctx context.Context) (LeaseHolder, error) {
	var (
		h    = LeaseHolder{NodeID: d.nodeID}
		secs float64
	)
	err := d.retry(ctx, func(ctx context.Context) error {
		return d.pool.QueryRow(ctx, `SELECT hostname, pid, started_at, extract(epoch FROM now() - heartbeat_at)::float8
			FROM daemon_lease WHERE node_id = $1`, d.nodeID).Scan(&h.Hostname, &h.PID, &h.StartedAt, &secs)
	})
	h.StartedAt = h.StartedAt.UTC()
	h.LastSeen = time.Duration(secs * float64(time.Second))
	return h, err
}

// Lease is the lease AcquireLease took on this DB, or nil.
func (d *DB) Lease() *Lease { return d.lease.Load() }

// Lost is closed when another daemon took the lease.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err is nil while the lease is held, else why it was lost (wrapping
// store.ErrLeaseLost).
func (l *Lease) Err() error {
	if p := l.err.Load(); p != nil {
		return *p
	}
	return nil
}

// check is what every store operation asks first.
func (l *Lease) check() error {
	if err := l.Err(); err != nil {
		return err
	}
	if since := time.Since(l.base) - time.Duration(l.confirmed.Load()); since > l.opts.StaleAfter-l.opts.Heartbeat {
		return fmt.Errorf("%w (last confirmed %s ago)", ErrLeaseUnconfirmed, since.Round(time.Second))
	}
	return nil
}

func (l *Lease) lose(err error) {
	l.lostOnce.Do(func() {
		l.err.Store(&err)
		close(l.lost)
	})
}

// loop heartbeats until stop, or until the lease is lost. A failed
// heartbeat is logged and retried sooner.
func (l *Lease) loop() {
	defer close(l.stopped)
	retry := min(2*time.Second, l.opts.Heartbeat)
	t := time.NewTimer(l.opts.Heartbeat)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.opts.Heartbeat)
		err := l.beat(ctx)
		cancel()
		switch {
		case errors.Is(err, store.ErrLeaseLost):
			l.d.log.Error("daemon lease lost: another daemon took it; refusing every store operation", "db", l.d.where, "node", l.d.nodeID, "err", err)
			return
		case err != nil:
			failures++
			if failures == 1 || failures%10 == 0 {
				l.d.log.Warn("daemon lease heartbeat failed; retrying", "db", l.d.where, "failures", failures, "err", err)
			}
			t.Reset(retry)
		default:
			if failures > 0 {
				l.d.log.Info("daemon lease heartbeat works again", "db", l.d.where, "after_failures", failures)
			}
			failures = 0
			t.Reset(l.opts.Heartbeat)
		}
	}
}

// beat renews the lease once; an error wrapping store.ErrLeaseLost when it
// belongs to another daemon now (the lease is then lost).
func (l *Lease) beat(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	sent := time.Since(l.base)
	var n int64
	err := l.d.retry(ctx, func(ctx context.Context) error {
		tag, err := l.d.pool.Exec(ctx, "UPDATE daemon_lease SET heartbeat_at = now() WHERE node_id = $1 AND owner = $2", l.d.nodeID, l.owner)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return err
	}
	if n == 1 {
		l.confirmed.Store(int64(sent))
		return nil
	}
	err = fmt.Errorf("%s: %w: the lease row was removed", l.d.where, store.ErrLeaseLost)
	if h, herr := l.d.leaseHolder(ctx); herr == nil {
		err = fmt.Errorf("%s: %w: the airlock daemon on host %s (pid %d) took it, started %s",
			l.d.where, store.ErrLeaseLost, h.Hostname, h.PID, h.StartedAt.Format(time.RFC3339))
	}
	l.lose(err)
	return err
}

// release stops the heartbeat and deletes the row if it is still ours.
func (l *Lease) release() {
	close(l.stop)
	<-l.stopped
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := l.d.retry(ctx, func(ctx context.Context) error {
		_, err := l.d.pool.Exec(ctx, "DELETE FROM daemon_lease WHERE node_id = $1 AND owner = $2", l.d.nodeID, l.owner)
		return err
	})
	if err != nil {
		l.d.log.Warn("releasing the daemon lease failed; the next daemon waits until it is stale", "db", l.d.where,
			"stale_after", l.opts.StaleAfter, "err", err)
		return
	}
	l.d.log.Info("daemon lease released", "db", l.d.where, "node", l.d.nodeID)
}

// BreakLease removes the lease row of holder h when it still names h (its
// host, pid and start): for a daemon that knows h is dead, its own
// predecessor on this host, so that a restart after a crash does not wait
// for the staleness bound. It holds no lease afterwards: AcquireLease next.
func (d *DB) BreakLease(ctx context.Context, h LeaseHolder) error {
	return d.retry(ctx, func(ctx context.Context) error {
		_, err := d.pool.Exec(ctx, `DELETE FROM daemon_lease WHERE node_id = $1 AND hostname = $2 AND pid = $3 AND started_at = $4`,
			d.nodeID, h.Hostname, h.PID, h.StartedAt)
		return err
	})
}
