package artifactgc

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
)

// TestVersion2ImageBlobs (issue 24): the blob of a version 2 image's large
// file (internal/artifacts.Images) is named by its manifest: kept while a
// row needs the image, collected with it otherwise; the manifest is not
// "unreadable" (which would hold every tree).
func TestVersion2ImageBlobs(t *testing.T) {
	f := newFixture(t, backends()[0])
	img := artifacts.Images{St: f.st}
	put := func(key, fill string) (tree, blob string) {
		dir := t.TempDir()
		pages := bytes.Repeat([]byte(fill), 9<<20) // past the size from which a file is a blob
		if err := os.WriteFile(filepath.Join(dir, "pages.img"), pages, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "small"), []byte(fill), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := img.Put(f.ctx, key, dir); err != nil {
			t.Fatal(err)
		}
		rc, _, err := f.st.Backend().Open(f.ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		var man struct {
			Version int              `json:"version"`
			Tree    artifacts.Digest `json:"tree"`
		}
		if err := json.NewDecoder(rc).Decode(&man); err != nil || man.Version != 2 {
			t.Fatalf("manifest %s: version %d, %v", key, man.Version, err)
		}
		return artifacts.TreeKey(man.Tree), artifacts.BlobKey(artifacts.DigestOf(pages))
	}
	t1, b1 := put("paused/p1/n1", "a")
	t2, b2 := put("paused/p2/n1", "b")
	refs := &fakeRefs{sandboxes: map[string]string{"p1": extra("paused/p1/n1")}}
	rep, err := Collect(f.ctx, f.opts(refs, later()))
	if err != nil {
		t.Fatal(err)
	}
	if rep.TreesHeld != "" {
		t.Fatalf("trees held: %s", rep.TreesHeld)
	}
	f.expect([]string{"paused/p1/n1", t1, b1}, []string{"paused/p2/n1", t2, b2})
}
