package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/startup"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// A template recorded (and pushed) by one node resolves on another node
// through --artifacts; when the store cannot be reached, the create's
// template resolution is a 503 naming the store, not "template not found".
func TestResolvePullsThroughArtifacts(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	noEnv := func(string) string { return "" }
	st := sandboxtest.NewStore()
	art := filepath.Join(t.TempDir(), "artifacts")
	node := func() *template.Manager {
		dir := t.TempDir()
		as, err := startup.OpenArtifacts(ctx, art, dir, noEnv, log)
		if err != nil {
			t.Fatal(err)
		}
		tm := template.NewManager(dir, st, log)
		tm.SetShared(true)
		tm.SetArtifacts(as)
		return tm
	}
	a, b := node(), node()
	hash := strings.Repeat("c", 64)
	tmp, err := os.MkdirTemp(a.Dir(), ".tmp-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tmp, "rootfs", "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := a.PublishLayer(tmp, hash, 0, `{"kind":"layer"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Register(ctx, "app", hash, `{"kind":"dockerfile","layers":["`+hash+`"]}`); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(art, art+".away"); err != nil {
		t.Fatal(err)
	}
	_, err = sandboxTemplates{b}.Resolve(ctx, "app")
	if ue, ok := sandbox.AsUserError(err); !ok || ue.Code != http.StatusServiceUnavailable || !strings.Contains(ue.Msg, "unreachable") {
		t.Fatalf("Resolve with the store away = %v, want a 503 saying unreachable", err)
	}
	if err := os.Rename(art+".away", art); err != nil {
		t.Fatal(err)
	}
	tpl, err := sandboxTemplates{b}.Resolve(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tpl.RootFS, "etc")); err != nil {
		t.Fatalf("pulled rootfs: %v", err)
	}
	if _, err := (sandboxTemplates{b}).Resolve(ctx, "nope"); !errors.Is(err, sandbox.ErrTemplateNotFound) {
		t.Fatalf("unknown template: %v", err)
	}
}
