package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFileDigestIgnoresSparseness(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := []byte(strings.Repeat("airlock!", 1000)) // 8000 bytes, not block aligned
	const size = 64 << 20
	// sparse: a hole, data at 40 MiB + 123, a hole to the end.
	sparse := filepath.Join(dir, "sparse")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 40<<20+123); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// dense: the same bytes with the zeros written out.
	dense := filepath.Join(dir, "dense")
	buf := make([]byte, size)
	copy(buf[40<<20+123:], data)
	if err := os.WriteFile(dense, buf, 0o600); err != nil {
		t.Fatal(err)
	}
	ds, n1, err := fileDigest(sparse)
	if err != nil {
		t.Fatal(err)
	}
	dd, n2, err := fileDigest(dense)
	if err != nil {
		t.Fatal(err)
	}
	if ds != dd || n1 != size || n2 != size || !strings.HasPrefix(ds, digestPrefix) {
		t.Fatalf("sparse %s (%d) vs dense %s (%d)", ds, n1, dd, n2)
	}
	// One changed byte, or a different size, changes the digest.
	buf[40<<20+200] ^= 1
	if err := os.WriteFile(dense, buf, 0o600); err != nil {
		t.Fatal(err)
	}
	if d, _, _ := fileDigest(dense); d == ds {
		t.Fatal("digest did not change with the content")
	}
	if err := os.Truncate(sparse, size+4096); err != nil {
		t.Fatal(err)
	}
	if d, _, _ := fileDigest(sparse); d == ds {
		t.Fatal("digest did not change with the size")
	}
}

func TestManifestRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "checkpoint"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"disk.img": "layer", "checkpoint/checkpoint.img": "memory"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("disk.img", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := writeManifest(dir, "sone"); err != nil {
		t.Fatal(err)
	}
	if err := verifyManifest(dir, "sone"); err != nil {
		t.Fatalf("fresh manifest: %v", err)
	}
	if err := verifyManifest(dir, "stwo"); err == nil {
		t.Fatal("manifest of another snapshot accepted")
	}
	if err := os.WriteFile(filepath.Join(dir, "extra"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := verifyManifest(dir, "sone"); err == nil || !strings.Contains(err.Error(), "extra") {
		t.Fatalf("extra file: %v", err)
	}
	os.Remove(filepath.Join(dir, "extra"))
	if err := os.Remove(filepath.Join(dir, "checkpoint/checkpoint.img")); err != nil {
		t.Fatal(err)
	}
	if err := verifyManifest(dir, "sone"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing file: %v", err)
	}
}
