package api

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"
)

// gzipTar is a gzip-compressed tar of n zero-filled files of size bytes.
func gzipTar(t *testing.T, n int, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	zero := make([]byte, 1<<16)
	for i := range n {
		if err := tw.WriteHeader(&tar.Header{Name: "f" + strings.Repeat("x", i%5) + string(rune('a'+i%26)), Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		for left := size; left > 0; {
			k := min(left, int64(len(zero)))
			if _, err := tw.Write(zero[:k]); err != nil {
				t.Fatal(err)
			}
			left -= k
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCopyTarCaps(t *testing.T) {
	// A small gzip bomb: 64 MiB of zeros in well under 1 MiB.
	bomb := gzipTar(t, 1, 64<<20)
	if len(bomb) > 1<<20 {
		t.Fatalf("bomb is %d bytes compressed", len(bomb))
	}
	var out bytes.Buffer
	_, err := copyTar(&out, bytes.NewReader(bomb), 8<<20, 100)
	var big *tarTooLargeError
	if !errors.As(err, &big) || !strings.Contains(err.Error(), "8 MiB") {
		t.Fatalf("gzip bomb: %v", err)
	}
	if out.Len() > 9<<20 {
		t.Errorf("wrote %d bytes before stopping", out.Len())
	}
	// Too many entries.
	_, err = copyTar(io.Discard, bytes.NewReader(gzipTar(t, 20, 0)), 8<<20, 10)
	if !errors.As(err, &big) || !strings.Contains(err.Error(), "10 entries") {
		t.Fatalf("entries: %v", err)
	}
	// Within the caps.
	if _, err := copyTar(io.Discard, bytes.NewReader(gzipTar(t, 5, 1000)), 8<<20, 10); err != nil {
		t.Fatalf("a small upload: %v", err)
	}
}
