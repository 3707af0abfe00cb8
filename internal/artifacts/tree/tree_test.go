package tree

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func TestUnpackRefusesEscapes(t *testing.T) {
	for _, c := range []struct {
		name    string
		entries []tar.Header
		want    string // in the refusal
	}{
		{"dotdot", []tar.Header{{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}}, `entry "../evil": not a clean relative path`},
		{"absolute", []tar.Header{{Name: "/etc/evil", Typeflag: tar.TypeReg, Mode: 0o644}}, `entry "/etc/evil": not a clean relative path`},
		{"through a symlink", []tar.Header{
			{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/tmp", Mode: 0o777},
			{Name: "link/evil", Typeflag: tar.TypeReg, Mode: 0o644},
		}, `entry "link/evil": its parent is not a directory of the archive`},
		{"parent never made", []tar.Header{{Name: "a/b", Typeflag: tar.TypeReg, Mode: 0o644}}, `entry "a/b": its parent is not a directory of the archive`},
		{"hard link outside", []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}, `hard link "h" to "/etc/passwd", which is no file extracted before`},
		{"unclean", []tar.Header{{Name: "a/./b", Typeflag: tar.TypeReg, Mode: 0o644}}, `entry "a/./b": not a clean relative path`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			zw, _ := zstd.NewWriter(&buf)
			tw := tar.NewWriter(zw)
			for _, h := range c.entries {
				h.Format = tar.FormatPAX
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
			}
			tw.Close()
			zw.Close()
			dst := filepath.Join(t.TempDir(), "out")
			err := Unpack(context.Background(), &buf, dst)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Unpack of %+v = %v, want a refusal with %q", c.entries, err, c.want)
			}
			assertNothingBeside(t, dst)
			if _, err := os.Lstat("/tmp/evil"); err == nil {
				t.Fatal("/tmp/evil was written")
			}
		})
	}
	// A GNU sparse entry (PAX 0.1) of a few bytes that the tar reader would
	// expand into 1 TiB of zeros. Go's writer does not write GNU.sparse
	// records, so the extended header is made by hand: a regular entry
	// holding the records, retyped as 'x'.
	t.Run("GNU sparse claiming 1 TiB", func(t *testing.T) {
		var raw bytes.Buffer
		tw := tar.NewWriter(&raw)
		var recs string
		for _, kv := range [][2]string{{"GNU.sparse.major", "0"}, {"GNU.sparse.minor", "1"}, {"GNU.sparse.size", "1099511627776"}, {"GNU.sparse.numblocks", "1"}, {"GNU.sparse.map", "0,0"}} {
			rec := " " + kv[0] + "=" + kv[1] + "\n"
			n := len(rec) + 2
			if len(fmt.Sprint(n)+rec) != n {
				n++
			}
			recs += fmt.Sprint(n) + rec
		}
		tw.WriteHeader(&tar.Header{Name: "x", Typeflag: tar.TypeReg, Size: int64(len(recs)), Format: tar.FormatUSTAR})
		tw.Write([]byte(recs))
		tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatUSTAR})
		tw.Close()
		b := raw.Bytes()
		b[156] = 'x'
		copy(b[148:156], "        ")
		sum := 0
		for _, c := range b[:512] {
			sum += int(c)
		}
		copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
		var z bytes.Buffer
		zw, _ := zstd.NewWriter(&z)
		zw.Write(b)
		zw.Close()
		if err := Unpack(context.Background(), &z, filepath.Join(t.TempDir(), "out")); err == nil || !strings.Contains(err.Error(), "GNU sparse") {
			t.Fatalf("Unpack of a GNU sparse entry = %v, want a refusal", err)
		}
	})
}

// assertNothingBeside checks a refused unpack into dst wrote nothing next to
// it: dst's parent holds dst alone.
func assertNothingBeside(t *testing.T, dst string) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(dst))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != filepath.Base(dst) {
			t.Errorf("%s written next to the unpack directory", e.Name())
		}
	}
}

// sparseArchive is a packed tree of one AIRLOCK.sparse entry of the given
// size whose data is map (the sparse map and segments as Pack writes them).
func sparseArchive(t *testing.T, size int64, data []byte) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := zstd.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range []*tar.Header{
		{Name: ".", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), PAXRecords: map[string]string{paxSparse: fmt.Sprint(size)}},
	} {
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	zw.Close()
	return &buf
}

// A sparse entry's size and segment count are bounded: a few bytes must not
// make a multi-TiB file (found in review).
func TestUnpackSparseLimits(t *testing.T) {
	for _, c := range []struct {
		name string
		size int64
		data []byte
		want string
	}{
		{"over 1 TiB", 1<<40 + 1, binary.AppendUvarint(nil, 0), "sparse file of 1099511627777 bytes: larger than the 1 TiB limit"},
		{"too many segments", 1 << 30, binary.AppendUvarint(nil, 1<<24+1), "bad sparse map: 16777217 segments, more than the limit of 16777216"},
		{"no map", 1 << 20, nil, "bad sparse map: EOF"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "out")
			err := Unpack(context.Background(), sparseArchive(t, c.size, c.data), dst)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Unpack = %v, want a refusal with %q", err, c.want)
			}
		})
	}
	// 1 TiB itself is accepted (a hole, no data).
	dst := filepath.Join(t.TempDir(), "out")
	if err := Unpack(context.Background(), sparseArchive(t, 1<<40, binary.AppendUvarint(nil, 0)), dst); err != nil {
		t.Fatalf("Unpack of a 1 TiB hole: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "big")); err != nil || fi.Size() != 1<<40 {
		t.Fatalf("the 1 TiB hole: %v, %v", fi, err)
	}
}
