package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

func TestTemplateBuildsSurviveReopen(t *testing.T) {
	db, path := openTemp(t)
	ctx := context.Background()
	t0 := time.Unix(1700000000, 7).UTC()
	b := &store.TemplateBuild{ID: "b1", TemplateID: "app", Status: "building", CreatedAt: t0, UpdatedAt: t0, Spec: `{"names":["app"]}`}
	if err := db.PutTemplateBuild(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Status, b.Logs, b.UpdatedAt = "ready", `[{"message":"x"}]`, t0.Add(time.Second)
	if err := db.PutTemplateBuild(ctx, b); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := db.GetTemplateBuild(ctx, "b1")
	if err != nil || got.Status != "ready" || got.TemplateID != "app" || got.Logs != b.Logs || !got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(b.UpdatedAt) || got.Spec != b.Spec {
		t.Fatalf("GetTemplateBuild = %+v, %v", got, err)
	}
	if _, err := db.GetTemplateBuild(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown build: %v", err)
	}
}

func TestListTemplateBuilds(t *testing.T) {
	db, _ := openTemp(t)
	ctx := context.Background()
	t0 := time.Unix(1700000000, 0).UTC()
	for i, id := range []string{"a1", "a2", "a3"} {
		if err := db.PutTemplateBuild(ctx, &store.TemplateBuild{ID: id, TemplateID: "app", Status: "ready", CreatedAt: t0.Add(time.Duration(i) * time.Second), Logs: "[1]"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.PutTemplateBuild(ctx, &store.TemplateBuild{ID: "o1", TemplateID: "other", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	got, err := db.ListTemplateBuilds(ctx, "app", 2)
	if err != nil || len(got) != 2 || got[0].ID != "a3" || got[1].ID != "a2" || got[0].Logs != "" || !got[0].CreatedAt.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("ListTemplateBuilds = %+v, %v", got, err)
	}
	if got, err := db.ListTemplateBuilds(ctx, "none", 10); err != nil || len(got) != 0 {
		t.Fatalf("unknown template: %+v, %v", got, err)
	}
}
