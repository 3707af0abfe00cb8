package postgres

import (
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/postgres/pgtest"
)

func acquire(t *testing.T, db *DB, opts LeaseOptions) *Lease {
	t.Helper()
	l, err := db.AcquireLease(ctxFor(t, 30*time.Second), opts)
	if err != nil {
		t.Fatalf("AcquireLease(%s): %v", opts.Hostname, err)
	}
	return l
}

// heldBy asserts that AcquireLease on db fails naming host a's daemon.
func heldBy(t *testing.T, db *DB, opts LeaseOptions, host string, pid int) {
	t.Helper()
	l, err := db.AcquireLease(ctxFor(t, 30*time.Second), opts)
	if err == nil {
		t.Fatalf("AcquireLease(%s) succeeded while %s holds the lease (owner %s)", opts.Hostname, host, l.owner)
	}
	var held *LeaseHeldError
	if !errors.As(err, &held) || held.Holder.Hostname != host || held.Holder.PID != pid {
		t.Fatalf("AcquireLease(%s): %v; want a *LeaseHeldError naming %s", opts.Hostname, err, host)
	}
	want := regexp.MustCompile(`^database already used by the airlock daemon on host ` + regexp.QuoteMeta(host) +
		` \(pid \d+\), last seen (less than 1 s|\d+ s) ago; one single-host daemon per database \(several hosts share one as cluster nodes: --role node\)$`)
	if !want.MatchString(err.Error()) {
		t.Fatalf("message %q does not match %s", err, want)
	}
}

func TestLease(t *testing.T) {
	srv := pgtest.Start(t)

	t.Run("SecondIsRefusedWithTheHolder", func(t *testing.T) {
		url := srv.NewDatabase(t)
		a, b := openDB(t, url), openDB(t, url)
		acquire(t, a, LeaseOptions{Hostname: "host-a", PID: 101})
		heldBy(t, b, LeaseOptions{Hostname: "host-b", PID: 202}, "host-a", 101)
		// The refused store holds no lease and still works (it is closed by
		// the daemon that failed to start).
		if err := b.PutSetting(ctxFor(t, 10*time.Second), "k", "v"); err != nil {
			t.Fatalf("PutSetting on the refused store: %v", err)
		}
		if _, err := a.AcquireLease(ctxFor(t, 10*time.Second), LeaseOptions{}); err == nil {
			t.Fatal("a second AcquireLease on the same DB succeeded")
		}
	})

	t.Run("ConcurrentStartsOneWins", func(t *testing.T) {
		url := srv.NewDatabase(t)
		const n = 5
		errs := make(chan error, n)
		for i := range n {
			db := openDB(t, url)
			go func() {
				_, err := db.AcquireLease(ctxFor(t, 30*time.Second), LeaseOptions{Hostname: "h", PID: 1000 + i})
				errs <- err
			}()
		}
		won := 0
		for range n {
			err := <-errs
			var held *LeaseHeldError
			switch {
			case err == nil:
				won++
			case !errors.As(err, &held):
				t.Errorf("AcquireLease: %v", err)
			}
		}
		if won != 1 {
			t.Fatalf("%d daemons took the lease, want 1", won)
		}
	})

	t.Run("StaleLeaseIsTakenOver", func(t *testing.T) {
		url := srv.NewDatabase(t)
		a, b := openDB(t, url), openDB(t, url)
		la := acquire(t, a, LeaseOptions{Hostname: "host-a", PID: 101})
		// host-a went silent 40 s ago (on the server's clock).
		if _, err := b.pool.Exec(ctxFor(t, 10*time.Second), "UPDATE daemon_lease SET heartbeat_at = now() - interval '40 seconds'"); err != nil {
			t.Fatal(err)
		}
		acquire(t, b, LeaseOptions{Hostname: "host-b", PID: 202})
		heldBy(t, openDB(t, url), LeaseOptions{Hostname: "host-c"}, "host-b", 202)

		// host-a's next heartbeat finds the lease gone: it is lost, and a's
		// store refuses to act.
		err := la.beat(ctxFor(t, 10*time.Second))
		if !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("heartbeat after the takeover: %v; want store.ErrLeaseLost", err)
		}
		select {
		case <-la.Lost():
		default:
			t.Fatal("Lost not closed")
		}
		if !regexp.MustCompile(`host host-b \(pid 202\) took it`).MatchString(la.Err().Error()) {
			t.Fatalf("Err = %v; want it to name host-b", la.Err())
		}
		if err := a.PutSetting(ctxFor(t, 10*time.Second), "k", "a"); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("PutSetting after losing the lease: %v; want store.ErrLeaseLost", err)
		}
		if _, err := a.ListSandboxes(ctxFor(t, 10*time.Second)); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("ListSandboxes after losing the lease: %v; want store.ErrLeaseLost", err)
		}
		// Closing a does not release b's lease.
		a.Close()
		heldBy(t, openDB(t, url), LeaseOptions{Hostname: "host-c"}, "host-b", 202)
	})

	t.Run("CloseReleasesAtOnce", func(t *testing.T) {
		url := srv.NewDatabase(t)
		a := openDB(t, url)
		acquire(t, a, LeaseOptions{Hostname: "host-a", PID: 101})
		a.Close()
		start := time.Now()
		acquire(t, openDB(t, url), LeaseOptions{Hostname: "host-b", PID: 202})
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("taking the released lease took %s", d)
		}
	})

	t.Run("UnconfirmedLeaseRefusesOperations", func(t *testing.T) {
		url := srv.NewDatabase(t)
		a := openDB(t, url)
		la := acquire(t, a, LeaseOptions{Hostname: "host-a", PID: 101, StaleAfter: time.Hour, Heartbeat: time.Minute})
		// As if the last heartbeat that got through was sent an hour ago.
		la.confirmed.Store(int64(time.Since(la.base) - time.Hour))
		if err := a.PutSetting(ctxFor(t, 10*time.Second), "k", "a"); !errors.Is(err, ErrLeaseUnconfirmed) {
			t.Fatalf("PutSetting with an unconfirmed lease: %v; want ErrLeaseUnconfirmed", err)
		}
		if err := la.beat(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
		if err := a.PutSetting(ctxFor(t, 10*time.Second), "k", "a"); err != nil {
			t.Fatalf("PutSetting after a heartbeat: %v", err)
		}
	})

	t.Run("BadTiming", func(t *testing.T) {
		a := openDB(t, srv.NewDatabase(t))
		if _, err := a.AcquireLease(ctxFor(t, 10*time.Second), LeaseOptions{StaleAfter: time.Second, Heartbeat: time.Second}); err == nil {
			t.Fatal("a heartbeat as long as the staleness bound was accepted")
		}
	})
}

// TestLeaseSurvivesServerRestart: the holder keeps heartbeating through a
// server restart (down for a second) and nobody else gets in, even after
// the staleness bound.
func TestLeaseSurvivesServerRestart(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	opts := LeaseOptions{Hostname: "host-a", PID: 101, StaleAfter: 3 * time.Second, Heartbeat: 200 * time.Millisecond}
	a := openDB(t, url)
	la := acquire(t, a, opts)

	// Down for a while (heartbeats fail), then up again.
	srv.Stop(t)
	time.Sleep(time.Second)
	srv.Restart(t)
	restarted := time.Now()
	// Wait past the staleness bound: were the heartbeats lost, the lease
	// would now be stale.
	time.Sleep(opts.StaleAfter + time.Second)
	select {
	case <-la.Lost():
		t.Fatalf("lease lost over a restart: %v", la.Err())
	default:
	}
	b := openDB(t, url)
	heldBy(t, b, LeaseOptions{Hostname: "host-b", StaleAfter: opts.StaleAfter, Heartbeat: opts.Heartbeat}, "host-a", 101)
	h, err := b.leaseHolder(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if h.LastSeen > time.Second || time.Since(restarted) < opts.StaleAfter {
		t.Fatalf("holder last seen %s ago, %s after the restart; want recent heartbeats", h.LastSeen, time.Since(restarted))
	}
	if err := a.PutSetting(ctxFor(t, 10*time.Second), "k", "a"); err != nil {
		t.Fatalf("the holder's store after the restart: %v", err)
	}
}
