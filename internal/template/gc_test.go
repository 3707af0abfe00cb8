package template

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeLayer publishes an empty layer directory named hash.
func fakeLayer(t *testing.T, m *Manager, hash string) {
	t.Helper()
	tmp, err := os.MkdirTemp(m.Dir(), tmpPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tmp, rootfsDir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := m.PublishLayer(tmp, hash, 0, `{"kind":"layer"}`); err != nil {
		t.Fatal(err)
	}
}

func TestGC(t *testing.T) {
	ctx := context.Background()
	m, _, fb, _ := newTestManager(t)
	base, err := m.Build(ctx, "base", BuildOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := func(c string) string { return strings.Repeat(c, 64) }
	for _, c := range []string{"a", "b", "c", "d", "e"} {
		fakeLayer(t, m, h(c))
	}
	// A Dockerfile template on layer "b" that lists "a" and "b"; "c" is in
	// use by a sandbox; "d" and "e" are old builds.
	if _, err := m.Register(ctx, "app", h("b"), `{"from":"base","layers":["`+h("a")+`","`+h("b")+`"]}`); err != nil {
		t.Fatal(err)
	}
	// Not while a build holds the store.
	release := m.Hold()
	if removed, ran, err := m.GC(ctx, map[string]bool{h("c"): true}); err != nil || ran || len(removed) > 0 {
		t.Fatalf("GC during a build: removed %v ran %v err %v", removed, ran, err)
	}
	release()
	removed, ran, err := m.GC(ctx, map[string]bool{h("c"): true})
	if err != nil || !ran {
		t.Fatalf("GC: ran %v err %v", ran, err)
	}
	if len(removed) != 2 || !((removed[0] == h("d") && removed[1] == h("e")) || (removed[0] == h("e") && removed[1] == h("d"))) {
		t.Fatalf("removed %v, want d and e", removed)
	}
	for _, c := range []string{"a", "b", "c"} {
		if _, ok := m.LayerPath(h(c)); !ok {
			t.Errorf("layer %s removed", c)
		}
	}
	if _, ok := m.LayerPath(base.Hash); !ok {
		t.Error("the base template was removed")
	}
	for _, c := range []string{"d", "e"} {
		if _, ok := m.LayerPath(h(c)); ok {
			t.Errorf("layer %s kept", c)
		}
	}
	noTmpLeft(t, filepath.Dir(m.Dir()))
	// A forced rebuild of base replaces it in place; the old one is not a
	// separate hash, and GC after it keeps the current build.
	if _, err := m.Build(ctx, "base", BuildOptions{Force: true}, nil); err != nil {
		t.Fatal(err)
	}
	if removed, _, _ := m.GC(ctx, nil); len(removed) != 1 || removed[0] != h("c") {
		t.Fatalf("GC once the sandbox is gone: removed %v, want only c", removed)
	}
	if fb.calls.Load() != 2 {
		t.Fatalf("builds: %d", fb.calls.Load())
	}
}

func TestCleanStaleKillsLeftoverBuilders(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(dir, "templates", tmpPrefix+"interrupted")
	if err := os.MkdirAll(filepath.Join(tmp, rootfsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	// A process still "building" in the interrupted directory (like a dpkg
	// that outlived a killed daemon).
	cmd := exec.Command("sleep", "300")
	cmd.Dir = filepath.Join(tmp, rootfsDir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	NewManager(dir, newFakeStore(), quietLog())
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("process working in the interrupted build dir still alive")
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("interrupted build dir still there: %v", err)
	}
}
