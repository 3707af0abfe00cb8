package agentbin

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestInstallIsContentAddressedAndIdempotent(t *testing.T) {
	src := filepath.Join(t.TempDir(), "airlock-envd")
	dir := filepath.Join(t.TempDir(), "agents")
	write(t, src, "build one")
	p1, err := Install(dir, src)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p1); string(b) != "build one" {
		t.Fatalf("installed copy holds %q", b)
	}
	if fi, _ := os.Stat(p1); fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v, want 0755", fi.Mode())
	}
	again, err := Install(dir, src)
	if err != nil || again != p1 {
		t.Fatalf("second install of the same build: %q, %v; want %q", again, err, p1)
	}

	// A new build at the same source path gets its own path; the old copy
	// is untouched (restored sandboxes still map it).
	write(t, src, "build two, longer")
	p2, err := Install(dir, src)
	if err != nil {
		t.Fatal(err)
	}
	if p2 == p1 {
		t.Fatal("a different binary was installed at the same path")
	}
	if b, _ := os.ReadFile(p1); string(b) != "build one" {
		t.Fatalf("the old copy changed: %q", b)
	}
	ents, _ := os.ReadDir(filepath.Dir(p2))
	if len(ents) != 1 {
		t.Fatalf("left temporary files: %v", ents)
	}
}

func TestInstallMissingSource(t *testing.T) {
	if _, err := Install(t.TempDir(), filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("installing a missing binary succeeded")
	}
}

func TestGCKeepsReferencedBuilds(t *testing.T) {
	src := filepath.Join(t.TempDir(), "airlock-envd")
	dir := filepath.Join(t.TempDir(), "agents")
	var paths []string
	for _, s := range []string{"a", "b", "c"} {
		write(t, src, s)
		p, err := Install(dir, src)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	// Something that is not an agent dir is left alone.
	if err := os.MkdirAll(filepath.Join(dir, "not-a-sum"), 0o755); err != nil {
		t.Fatal(err)
	}
	n, err := GC(dir, []string{paths[0], paths[2]})
	if err != nil || n != 1 {
		t.Fatalf("GC removed %d, %v; want 1", n, err)
	}
	for i, p := range paths {
		_, err := os.Stat(p)
		if (i == 1) != os.IsNotExist(err) {
			t.Fatalf("after GC, %s: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "not-a-sum")); err != nil {
		t.Fatal("GC removed a directory it does not own")
	}
	if n, err := GC(filepath.Join(t.TempDir(), "none"), nil); n != 0 || err != nil {
		t.Fatalf("GC of a missing dir: %d, %v", n, err)
	}
}
