package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

func TestSnapshotsCRUD(t *testing.T) {
	db, path := openTemp(t)
	ctx := context.Background()
	t0 := time.Unix(1700000000, 5).UTC()
	for i, id := range []string{"sb", "sa", "sc"} {
		s := &store.Snapshot{ID: id, Name: "n-" + id, SandboxID: "i1", SizeBytes: int64(i), CreatedAt: t0.Add(time.Duration(i%2) * time.Second), Spec: `{"x":1}`}
		if err := db.PutSnapshot(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// Replace keeps one row per id.
	if err := db.PutSnapshot(ctx, &store.Snapshot{ID: "sb", Name: "", SandboxID: "i1", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	got, err := db.GetSnapshot(ctx, "sb")
	if err != nil || got.Name != "" || !got.CreatedAt.Equal(t0) {
		t.Fatalf("GetSnapshot = %+v, %v", got, err)
	}
	db.Close()
	// Survives a reopen, ordered by (created, id).
	db, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	all, err := db.ListSnapshots(ctx)
	if err != nil || len(all) != 3 || all[0].ID != "sb" || all[1].ID != "sc" || all[2].ID != "sa" || all[1].Spec != `{"x":1}` {
		t.Fatalf("ListSnapshots = %v, %v", all, err)
	}
	if err := db.DeleteSnapshot(ctx, "sa"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteSnapshot(ctx, "sa"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := db.GetSnapshot(ctx, "sa"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
}
