package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The pool replaces a connection that fails, but after the server restarts
// every idle connection in it is dead, and each would fail one call in
// turn. So the first call that meets a lost connection resets the pool
// (all idle connections go) and, when the failed statement cannot have
// taken effect, runs once more on a fresh connection. Callers then see no
// error from a restart that finished before their call.

// connLost reports whether err means the connection (or the server) went
// away.
func connLost(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && len(pe.Code) == 5 {
		switch pe.Code[:2] {
		case "08", "57": // connection exception; operator intervention (shutdown, crash)
			return pe.Code != "57014" // 57014 is a cancelled query
		}
		return false
	}
	return pgconn.SafeToRetry(err)
}

// retryable reports whether the failed statement certainly did not commit:
// it was never sent, or the server ended the session (a shutdown aborts
// what is in flight).
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "57P01" || pe.Code == "57P02" // admin_shutdown, crash_shutdown
	}
	return pgconn.SafeToRetry(err)
}

// run runs a store operation: refused when the daemon lease is lost or
// unconfirmed (lease.go), else through retry.
func (d *DB) run(ctx context.Context, fn func(ctx context.Context) error) error {
	if l := d.lease.Load(); l != nil {
		if err := l.check(); err != nil {
			return err
		}
	}
	return d.retry(ctx, fn)
}

// retry runs fn, resetting the pool when it meets a lost connection and
// running fn once more when that is safe.
func (d *DB) retry(ctx context.Context, fn func(ctx context.Context) error) error {
	err := fn(ctx)
	if err == nil || !connLost(err) || ctx.Err() != nil {
		return err
	}
	d.log.Warn("database connection lost; reconnecting", "db", d.where, "err", err)
	d.pool.Reset()
	if !retryable(err) {
		return err
	}
	return fn(ctx)
}

// exec runs one statement through run.
func (d *DB) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := d.run(ctx, func(ctx context.Context) (err error) {
		tag, err = d.pool.Exec(ctx, sql, args...)
		return err
	})
	return tag, err
}

// queryRow runs a one-row query and its scan through run.
func (d *DB) queryRow(ctx context.Context, scan func(pgx.Row) error, sql string, args ...any) error {
	return d.run(ctx, func(ctx context.Context) error {
		return scan(d.pool.QueryRow(ctx, sql, args...))
	})
}
