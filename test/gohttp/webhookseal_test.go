//go:build e2e

package gohttp

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// assertWebhookSecretSealed checks, in the daemon's SQLite store, that
// webhook id's secret column is sealed and does not hold secret (skipped
// without AIRLOCK_E2E_DATA_DIR, as when the suite targets a remote
// daemon).
func assertWebhookSecretSealed(t *testing.T, id, secret string) {
	t.Helper()
	dd := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	if dd == "" {
		return
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dd, "airlock.db")+"?_pragma=busy_timeout(10000)&mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var stored string
	if err := db.QueryRow("SELECT secret FROM webhooks WHERE id = ?", id).Scan(&stored); err != nil {
		t.Fatalf("reading webhook %s's stored secret: %v", id, err)
	}
	if strings.Contains(stored, secret) || !strings.HasPrefix(stored, "sealed:v1:") {
		t.Errorf("webhook %s's secret is stored as %q: want it sealed (sealed:v1:…), not the secret", id, stored)
	}
}
