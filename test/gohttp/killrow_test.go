//go:build e2e

package gohttp

// A kill answers before the sandbox's store row is deleted (issue 24): the
// row goes in the background, the in-memory index and the teardown journal
// keep the sandbox gone meanwhile, and across a daemon SIGKILL.

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the daemon's own store driver
)

// journalOpen reports whether the daemon's teardown journal
// (teardown/journal.log, JSON lines, a later line of an id replacing an
// earlier one) holds an unfinished teardown of sandbox id.
func journalOpen(id string) bool {
	data, _ := os.ReadFile(filepath.Join(os.Getenv("AIRLOCK_E2E_DATA_DIR"), "teardown", "journal.log"))
	open := false
	for _, line := range strings.Split(string(data), "\n") {
		var r struct {
			ID   string `json:"id"`
			Done bool   `json:"done"`
		}
		if json.Unmarshal([]byte(line), &r) == nil && r.ID == id {
			open = !r.Done
		}
	}
	return open
}

// storeLock holds the daemon's SQLite writer lock (BEGIN IMMEDIATE on its
// database) until released: every write of the daemon waits (its busy
// timeout is 10 s), as under a loaded host's writer queue, only longer.
type storeLock struct {
	db   *sql.DB
	conn *sql.Conn
}

func lockStore(t *testing.T) *storeLock {
	t.Helper()
	path := filepath.Join(os.Getenv("AIRLOCK_E2E_DATA_DIR"), "airlock.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("taking the store's writer lock: %v", err)
	}
	l := &storeLock{db: db, conn: conn}
	t.Cleanup(l.release)
	return l
}

// hasRow reports whether the sandboxes table holds id (read inside the
// lock's transaction: what is committed).
func (l *storeLock) hasRow(t *testing.T, id string) bool {
	t.Helper()
	var n int
	if err := l.conn.QueryRowContext(context.Background(), "SELECT count(*) FROM sandboxes WHERE id = ?", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func (l *storeLock) release() {
	if l.conn != nil {
		_, _ = l.conn.ExecContext(context.Background(), "ROLLBACK")
		_ = l.conn.Close()
		_ = l.db.Close()
		l.conn = nil
	}
}

// storeHasRow reads the sandboxes table without holding anything.
func storeHasRow(t *testing.T, id string) bool {
	t.Helper()
	path := filepath.Join(os.Getenv("AIRLOCK_E2E_DATA_DIR"), "airlock.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM sandboxes WHERE id = ?", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// A running and a paused sandbox are killed while the store cannot be
// written: both kills answer (they waited up to the store's 10 s busy
// timeout before), and the sandboxes are gone for clients (404 on get,
// connect and resume, in no list) although their rows are still there. The
// daemon is SIGKILLed right then; the next start finishes both kills from
// the journal: the rows go, the sandboxes never come back, their teardowns
// finish.
func TestKillAnswersBeforeTheRowIsDeleted(t *testing.T) {
	e := loadEnv(t)
	running := e.createV1(t, 300, nil)
	paused := e.createV1(t, 300, nil)
	if r := e.api(t, http.MethodPost, "/sandboxes/"+paused.SandboxID+"/pause", nil); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	ids := []string{running.SandboxID, paused.SandboxID}

	lock := lockStore(t)
	for _, id := range ids {
		status, took := e.killTimed(t, id)
		if status != http.StatusNoContent {
			t.Fatalf("DELETE %s: %d, want 204", id, status)
		}
		t.Logf("kill of %s answered in %v with the store locked", id, took)
		if took > 5*time.Second {
			t.Errorf("kill of %s took %v: it waited for the store row's deletion", id, took)
		}
	}
	requireAllGone := func(when string) {
		t.Helper()
		listed := map[string]bool{}
		for _, path := range []string{"/sandboxes", "/v2/sandboxes?state=running,paused"} {
			r := e.api(t, http.MethodGet, path, nil)
			if r.status != http.StatusOK {
				t.Fatalf("GET %s %s: %d %s", path, when, r.status, r.body)
			}
			var list []struct {
				SandboxID string `json:"sandboxID"`
			}
			r.json(t, &list)
			for _, s := range list {
				listed[s.SandboxID] = true
			}
		}
		for _, id := range ids {
			if st, _ := e.sandboxState(t, id); st != http.StatusNotFound {
				t.Errorf("GET %s %s: %d, want 404", id, when, st)
			}
			if listed[id] {
				t.Errorf("%s listed %s", id, when)
			}
			for _, op := range []string{"connect", "resume"} {
				if r := e.api(t, http.MethodPost, "/sandboxes/"+id+"/"+op, map[string]any{"timeout": 60}); r.status != http.StatusNotFound {
					t.Errorf("POST %s/%s %s: %d %s, want 404", id, op, when, r.status, r.body)
				}
			}
		}
	}
	requireAllGone("with the rows still there")
	for _, id := range ids {
		if !lock.hasRow(t, id) {
			t.Fatalf("set-up: the row of %s went although the store was locked", id)
		}
		if !journalOpen(id) {
			t.Errorf("no open teardown journal entry for %s after its kill answered", id)
		}
	}

	restartDaemon(t, e, lock.release)
	requireAllGone("after the restart")
	for _, id := range ids {
		if storeHasRow(t, id) {
			t.Errorf("row of %s still there after the restart", id)
		}
		var what string
		if !waitFor(2*time.Minute, 250*time.Millisecond, func() (ok bool) { ok, what = teardownDone(t, id); return ok }) {
			t.Errorf("teardown of %s not finished after the restart: %s left", id, what)
		}
	}
}
