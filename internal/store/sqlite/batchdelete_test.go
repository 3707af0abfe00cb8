package sqlite

import (
	"context"
	"errors"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// DeleteSandboxes removes the rows named, leaves the others, and takes ids
// without a row in its stride.
func TestDeleteSandboxes(t *testing.T) {
	db, _ := openTemp(t)
	ctx := context.Background()
	for _, id := range []string{"ia", "ib", "ic"} {
		if err := db.PutSandbox(ctx, &store.Sandbox{ID: id, TemplateID: "base", Slot: -1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.DeleteSandboxes(ctx, []string{"ia", "ic", "inone"}); err != nil {
		t.Fatalf("DeleteSandboxes: %v", err)
	}
	for id, want := range map[string]bool{"ia": false, "ib": true, "ic": false} {
		_, err := db.GetSandbox(ctx, id)
		if got := err == nil; got != want {
			t.Errorf("row %s there: %v, want %v (err %v)", id, got, want, err)
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetSandbox(%s): %v", id, err)
		}
	}
	if err := db.DeleteSandboxes(ctx, nil); err != nil {
		t.Errorf("DeleteSandboxes(nil): %v", err)
	}
}
