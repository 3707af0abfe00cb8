package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

func TestHasInterpreter(t *testing.T) {
	root := t.TempDir()
	if hasInterpreter(root) {
		t.Fatal("a root without ipykernel reported an interpreter")
	}
	if err := os.MkdirAll(filepath.Join(root, interpreterMarkers[0]), 0o755); err != nil {
		t.Fatal(err)
	}
	if !hasInterpreter(root) {
		t.Fatal("a root with ipykernel reported no interpreter")
	}
	if !hasInterpreter("") {
		t.Fatal("an unknown root must count as having an interpreter")
	}
}
