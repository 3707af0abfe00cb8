package secrets_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/secretbox"
	"github.com/airlock-sandbox/airlock/internal/secrets"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/sqlite"
)

func service(t *testing.T) (*secrets.Service, *sqlite.DB) {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	box, err := secretbox.New(bytes.Repeat([]byte{3}, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return &secrets.Service{Store: db, Box: box}, db
}

// A sealed value opens only for its own record and version: copied to
// another secret, or replayed as an older version, it does not.
func TestSealedBoundToIDAndVersion(t *testing.T) {
	ctx := context.Background()
	s, db := service(t)
	a, err := s.Create(ctx, "a", "value-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Create(ctx, "b", "value-b", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Copy a's sealed value into b's row (same version).
	b.Sealed, b.Version = a.Sealed, 2
	if err := db.UpdateSecret(ctx, b); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Resolve(ctx, "b"); !errors.Is(err, secretbox.ErrOpen) || v != nil {
		t.Fatalf("b with a's sealed value = %q, %v; want ErrOpen", v, err)
	}
	// An old version's sealed value replayed as a newer version.
	old := a.Sealed
	if _, err := s.Update(ctx, "a", "value-a2", nil); err != nil {
		t.Fatal(err)
	}
	cur, _ := db.GetSecret(ctx, a.ID)
	cur.Sealed, cur.Version = old, cur.Version+1
	if err := db.UpdateSecret(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, "A"); !errors.Is(err, secretbox.ErrOpen) {
		t.Fatalf("replayed version: %v; want ErrOpen", err)
	}
	if _, err := s.Resolve(ctx, "missing"); !errors.Is(err, secrets.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if m, err := s.Missing(ctx, []string{"a", "B", "zz"}); err != nil || len(m) != 1 || m[0] != "zz" {
		t.Fatalf("Missing = %v, %v", m, err)
	}
	var _ store.SecretStore = db
}
