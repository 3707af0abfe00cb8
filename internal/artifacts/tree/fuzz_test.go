package tree

import (
	"archive/tar"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzUnpack feeds arbitrary tar streams to Unpack's extraction: it may refuse them, but
// never panics and never creates anything outside its destination.
func FuzzUnpack(f *testing.F) {
	add := func(hdrs ...tar.Header) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range hdrs {
			h.Format = tar.FormatPAX
			tw.WriteHeader(&h)
			if h.Size > 0 {
				tw.Write(bytes.Repeat([]byte{'x'}, int(h.Size)))
			}
		}
		tw.Close()
		f.Add(buf.Bytes())
	}
	add(tar.Header{Name: ".", Typeflag: tar.TypeDir, Mode: 0o755}, tar.Header{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "a/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3}, tar.Header{Name: "a/l", Typeflag: tar.TypeLink, Linkname: "a/f"},
		tar.Header{Name: "s", Typeflag: tar.TypeSymlink, Linkname: "../../etc"})
	add(tar.Header{Name: "../x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	add(tar.Header{Name: "sp", Typeflag: tar.TypeReg, Mode: 0o644, Size: 8, PAXRecords: map[string]string{paxSparse: "100"}})
	f.Fuzz(func(t *testing.T, data []byte) {
		// The tar layer (Unpack's zstd decoding is the library's).
		base, err := os.MkdirTemp("", "airlock-fuzz-unpack-*")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(base)
		unpackTar(context.Background(), tar.NewReader(bytes.NewReader(data)), filepath.Join(base, "dst"))
		filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err == nil && p != base && !strings.HasPrefix(p, filepath.Join(base, "dst")) {
				t.Fatalf("Unpack created %s outside its destination", p)
			}
			return nil
		})
		// Leave nothing the temp dir cleanup cannot remove.
		filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o700)
			}
			return nil
		})
	})
}
