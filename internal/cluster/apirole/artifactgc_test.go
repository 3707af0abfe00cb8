package apirole

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/postgres"
	"github.com/airlock-sandbox/airlock/internal/store/postgres/pgtest"
)

// TestArtifactGCOnTheAPITier: with --artifacts the api tier opens the
// store and collects it in the background: the manifest of a template no
// row has, and its tree, go; the referenced template stays.
func TestArtifactGCOnTheAPITier(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dataDir, root := t.TempDir(), filepath.Join(t.TempDir(), "artifacts")

	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{ArtifactGCInterval: time.Hour}, ""},
		{Config{Artifacts: root}, ""},
		{Config{Artifacts: root, ArtifactGCInterval: -time.Second}, "--artifact-gc-interval must not be negative"},
	} {
		art, err := openArtifactGC(ctx, c.cfg, dataDir, log)
		if art != nil || (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("openArtifactGC(%+v) = %v, %v; want no store, error %q", c.cfg, art, err, c.want)
		}
	}

	db, err := postgres.Open(ctx, pgtest.Start(t).NewDatabase(t), log)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.PutTemplate(ctx, &store.Template{Name: "kept", Hash: "h1", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Artifacts: root, ArtifactGCInterval: time.Hour}
	art, err := openArtifactGC(ctx, cfg, dataDir, log)
	if err != nil || art == nil {
		t.Fatalf("openArtifactGC: %v, %v", art, err)
	}
	// Two templates pushed two hours ago, as template.push writes them.
	var keys []string
	for _, hash := range []string{"h1", "h2"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte(hash), 0o644); err != nil {
			t.Fatal(err)
		}
		info, err := art.PutDir(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{"version": 1, "hash": hash, "rootfs": info.Digest})
		if _, err := art.Put(ctx, "templates/"+hash, bytes.NewReader(b), int64(len(b)), artifacts.DigestOf(b)); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, "templates/"+hash, info.Key)
	}
	old := time.Now().Add(-2 * time.Hour)
	for _, k := range keys {
		if err := os.Chtimes(filepath.Join(root, filepath.FromSlash(k)), old, old); err != nil {
			t.Fatal(err)
		}
	}

	defer func(d time.Duration) { artifactGCFirstDelay = d }(artifactGCFirstDelay)
	artifactGCFirstDelay = 10 * time.Millisecond
	gctx, stop := context.WithCancel(ctx)
	done := runArtifactGC(gctx, art, db, cfg, log)
	for {
		if ok, err := art.Exists(ctx, keys[3]); err != nil { // the tree: deleted last
			t.Fatal(err)
		} else if !ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the unreferenced template was not collected")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-done
	for i, k := range keys {
		ok, err := art.Exists(ctx, k)
		if err != nil || ok != (i < 2) {
			t.Errorf("%s exists: %v, %v", k, ok, err)
		}
	}
}
