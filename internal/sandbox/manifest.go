package sandbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// manifestName is the file in every snapshot directory that lists (and
// hashes) every other file in it. A snapshot directory without a manifest
// that verifies is never used.
const manifestName = "manifest.json"

// manifest describes a snapshot directory's files.
type manifest struct {
	Version int            `json:"version"`
	ID      string         `json:"id"`
	Files   []manifestFile `json:"files"`
}

// manifestFile is one entry: a regular file with its digest, a symlink with
// its target, or another kind (overlay whiteouts are character devices)
// with its mode and device number.
type manifestFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size,omitempty"`
	Digest string `json:"digest,omitempty"` // regular files: digestPrefix + hex
	Link   string `json:"link,omitempty"`
	Mode   uint32 `json:"mode,omitempty"` // non-regular, non-symlink files
	Rdev   uint64 `json:"rdev,omitempty"`
}

// digestPrefix names the digest: SHA-256 over the file's non-zero 4 KiB
// blocks, each preceded by its offset (8 bytes, big endian), followed by the
// file size. Holes and zero blocks are skipped, so two files with the same
// contents have the same digest whatever their sparseness, and a sparse
// 10 GiB layer image is hashed at the cost of its data.
const digestPrefix = "sha256-blocks:"

const digestBlock = 4096

// Linux lseek whence values (SEEK_DATA, SEEK_HOLE).
const (
	seekData = 3
	seekHole = 4
)

// fileDigest hashes path as described at digestPrefix.
func fileDigest(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	size := st.Size()
	h := sha256.New()
	buf := make([]byte, 1<<20)
	zero := make([]byte, digestBlock)
	var hdr [8]byte
	hashRange := func(from, to int64) error {
		from -= from % digestBlock
		for off := from; off < to; {
			n := min(int64(len(buf)), to-off)
			n = (n + digestBlock - 1) / digestBlock * digestBlock
			got, err := f.ReadAt(buf[:n], off)
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			for b := 0; b < got; b += digestBlock {
				blk := buf[b:min(b+digestBlock, got)]
				if bytes.Equal(blk, zero[:len(blk)]) {
					continue
				}
				binary.BigEndian.PutUint64(hdr[:], uint64(off)+uint64(b))
				h.Write(hdr[:])
				h.Write(blk)
			}
			if got == 0 {
				break
			}
			off += int64(got)
		}
		return nil
	}
	off := int64(0)
	for off < size {
		data, err := f.Seek(off, seekData)
		if errors.Is(err, syscall.ENXIO) {
			break // no data after off
		}
		if err != nil {
			// No SEEK_DATA support: hash everything.
			if err := hashRange(off, size); err != nil {
				return "", 0, err
			}
			break
		}
		hole, err := f.Seek(data, seekHole)
		if err != nil {
			hole = size
		}
		if err := hashRange(data, hole); err != nil {
			return "", 0, err
		}
		// Blocks straddling a data/hole boundary are hashed once.
		off = (hole + digestBlock - 1) / digestBlock * digestBlock
	}
	binary.BigEndian.PutUint64(hdr[:], uint64(size))
	h.Write(hdr[:])
	return digestPrefix + hex.EncodeToString(h.Sum(nil)), size, nil
}

// scanDir lists every file under dir except the manifest, sorted by path.
func scanDir(dir string) ([]manifestFile, error) {
	var out []manifestFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." || rel == manifestName || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mf := manifestFile{Path: rel}
		switch {
		case info.Mode().IsRegular():
			if mf.Digest, mf.Size, err = fileDigest(p); err != nil {
				return fmt.Errorf("hashing %s: %w", rel, err)
			}
		case info.Mode()&fs.ModeSymlink != 0:
			if mf.Link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			mf.Mode = uint32(info.Mode())
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				mf.Rdev = uint64(st.Rdev) //nolint:unconvert // uint32 on some platforms
			}
		}
		out = append(out, mf)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b manifestFile) int {
		switch {
		case a.Path < b.Path:
			return -1
		case a.Path > b.Path:
			return 1
		}
		return 0
	})
	return out, nil
}

// writeManifest hashes dir and writes its manifest (synced to disk).
func writeManifest(dir, id string) error {
	files, err := scanDir(dir)
	if err != nil {
		return fmt.Errorf("hashing snapshot files: %w", err)
	}
	b, err := json.MarshalIndent(manifest{Version: 1, ID: id, Files: files}, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, manifestName), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("writing snapshot manifest: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing snapshot manifest: %w", err)
	}
	return nil
}

// verifyManifest checks that dir holds exactly the files its manifest
// lists, with the same digests, and that it belongs to snapshot id.
func verifyManifest(dir, id string) error {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return fmt.Errorf("reading manifest: %w", err)
	}
	var want manifest
	if err := json.Unmarshal(b, &want); err != nil {
		return fmt.Errorf("parsing manifest: %w", err)
	}
	if want.ID != id {
		return fmt.Errorf("manifest belongs to snapshot %q", want.ID)
	}
	got, err := scanDir(dir)
	if err != nil {
		return fmt.Errorf("hashing files: %w", err)
	}
	idx := map[string]manifestFile{}
	for _, f := range got {
		idx[f.Path] = f
	}
	for _, w := range want.Files {
		g, ok := idx[w.Path]
		if !ok {
			return fmt.Errorf("file %s is missing", w.Path)
		}
		if g != w {
			return fmt.Errorf("file %s does not match the manifest", w.Path)
		}
		delete(idx, w.Path)
	}
	for p := range idx {
		return fmt.Errorf("file %s is not in the manifest", p)
	}
	return nil
}
