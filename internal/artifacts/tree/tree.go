// Package tree packs a directory into one stream and back: a PAX tar
// compressed with zstd, keeping what root filesystems and snapshot
// directories need (see Pack). internal/artifacts stores trees this way.
package tree

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// Directory trees are stored as a PAX tar stream compressed with zstd
// (github.com/klauspost/compress/zstd), written in lexical path order with
// no access or change times and no user or group names, so the same tree
// packs to the same bytes and the same TreeKey.
//
// Kept: regular files, directories (empty ones too), symlinks, hard links
// (a later path of an inode is a tar link to the first), character and block
// devices and FIFOs; permission bits with setuid, setgid and sticky; numeric
// owner and group (restored when unpacking as root); modification times in
// nanoseconds; extended attributes of every namespace readable here
// (SCHILY.xattr.* records, restored after the owner, so security.capability
// survives the chown).
//
// Sparse files (fewer blocks allocated than their size: a sandbox's
// disk.img, a root filesystem's preallocated databases) keep their holes: the
// data segments are found with SEEK_DATA/SEEK_HOLE and the entry carries the
// PAX record AIRLOCK.sparse=<real size>, its data being a segment map (a
// uvarint count, then uvarint offset and length pairs) followed by the
// segments' bytes. Unpacking writes the segments at their offsets and sets
// the size, so a 10 GiB image with 5 MiB of data costs 5 MiB to pack, move
// and unpack. Other tar readers see such an entry as a file holding the map
// and the data; only Unpack restores it. Sockets are skipped.
const paxSparse = "AIRLOCK.sparse"

// Limits on a sparse entry, which a few bytes of archive can describe: its
// size (1 TiB; more is refused, not made as a huge sparse file) and its
// number of data segments.
const (
	maxSparseSize     = 1 << 40
	maxSparseSegments = 1 << 24
)

// What Unpack refuses to make, whatever the archive says (it runs as root,
// and the archive comes from a store that others can write; a sandbox image
// or a root filesystem never needs these on the host):
//   - character and block devices, except the character device 0/0 (an
//     overlay whiteout, which a sandbox's saved writable layer holds; it
//     opens nothing). A root filesystem's /dev is made by the runtime
//     (gVisor's own /dev, the guest kernel's devtmpfs), so its device nodes
//     are not needed; one such as /dev/mem or a disk's block device would
//     give whoever opens it on the host the host's memory or disks;
//   - extended attributes outside user.*, system.posix_acl_access,
//     system.posix_acl_default, security.capability (file capabilities:
//     ping and the like in a root filesystem, which only the sandbox's
//     kernel, gVisor's or the guest's, acts on) and trusted.overlay.opaque
//     (an opaque directory of an overlay upper layer, as the host kernel's
//     overlayfs writes it under a gVisor sandbox's layer). Other trusted.*
//     attributes (overlayfs redirects and metacopy, which the host kernel
//     follows when it mounts the layer) and other security.* ones (SELinux
//     labels, IMA/EVM) are dropped.
//
// Pack keeps everything: what is dropped is decided when it is unpacked.

// keepXattr reports whether Unpack sets the extended attribute name.
func keepXattr(name string) bool {
	switch name {
	case "security.capability", "trusted.overlay.opaque", "system.posix_acl_access", "system.posix_acl_default":
		return true
	}
	return strings.HasPrefix(name, "user.")
}

// keepDevice reports whether Unpack makes the device node of hdr (a
// character or block device).
func keepDevice(hdr *tar.Header) bool {
	return hdr.Typeflag == tar.TypeChar && hdr.Devmajor == 0 && hdr.Devminor == 0
}

// xattrPrefix is the PAX record prefix of extended attributes (as GNU tar
// and Go's archive/tar name them).
const xattrPrefix = "SCHILY.xattr."

// Pack writes dir as a tar+zstd stream to w.
func Pack(ctx context.Context, w io.Writer, dir string) error {
	return PackSkip(ctx, w, dir, nil)
}

// PackSkip is Pack without the entries whose slash-separated path
// relative to dir is in skip (artifacts.Images stores an image's large
// files as blobs of their own, next to the tree of the rest).
func PackSkip(ctx context.Context, w io.Writer, dir string, skip map[string]bool) error {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	if err := packTree(ctx, tw, dir, skip); err != nil {
		zw.Close()
		return err
	}
	if err := tw.Close(); err != nil {
		zw.Close()
		return err
	}
	return zw.Close()
}

type inode struct{ dev, ino uint64 }

func packTree(ctx context.Context, tw *tar.Writer, root string, skip map[string]bool) error {
	fi, err := os.Lstat(root)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("pack %s: not a directory", root)
	}
	links := map[inode]string{}
	buf := make([]byte, 1<<20)
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if skip[name] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("pack %s: no stat", p)
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		target := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return fmt.Errorf("pack %s: %w", p, err)
		}
		hdr.Name = name
		if fi.IsDir() && name != "." {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
		hdr.Uname, hdr.Gname = "", ""
		hdr.ModTime = time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		hdr.PAXRecords = nil
		if err := addXattrs(hdr, p); err != nil {
			return fmt.Errorf("pack %s: %w", p, err)
		}
		var segs []segment
		if fi.Mode().IsRegular() {
			if st.Nlink > 1 {
				id := inode{uint64(st.Dev), st.Ino}
				if first, ok := links[id]; ok {
					hdr.Typeflag = tar.TypeLink
					hdr.Linkname = first
					hdr.Size = 0
					return tw.WriteHeader(hdr)
				}
				links[id] = name
			}
			if st.Blocks*512 < st.Size {
				if segs, err = dataSegments(p, st.Size); err != nil {
					return fmt.Errorf("pack %s: %w", p, err)
				}
			}
		}
		if segs != nil {
			m := sparseMap(segs)
			hdr.Size = int64(len(m))
			for _, s := range segs {
				hdr.Size += s.length
			}
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords[paxSparse] = strconv.FormatInt(fi.Size(), 10)
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if _, err := tw.Write(m); err != nil {
				return err
			}
			return copySegments(tw, p, segs, buf)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.CopyBuffer(tw, f, buf); err != nil {
			return fmt.Errorf("pack %s: %w", p, err)
		}
		return nil
	})
}

func addXattrs(hdr *tar.Header, p string) error {
	names, err := listXattrs(p)
	if err != nil {
		return err
	}
	for _, n := range names {
		v, err := getXattr(p, n)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return fmt.Errorf("xattr %s: %w", n, err)
		}
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords[xattrPrefix+n] = string(v)
	}
	return nil
}

func listXattrs(p string) ([]string, error) {
	size := 256
	for {
		buf := make([]byte, size)
		n, err := unix.Llistxattr(p, buf)
		if errors.Is(err, unix.ERANGE) {
			size *= 4
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var out []string
		for _, s := range strings.Split(string(buf[:n]), "\x00") {
			if s != "" {
				out = append(out, s)
			}
		}
		return out, nil
	}
}

func getXattr(p, name string) ([]byte, error) {
	size := 256
	for {
		buf := make([]byte, size)
		n, err := unix.Lgetxattr(p, name, buf)
		if errors.Is(err, unix.ERANGE) {
			size *= 4
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

type segment struct{ offset, length int64 }

// dataSegments lists the data of a file with SEEK_DATA/SEEK_HOLE.
func dataSegments(p string, size int64) ([]segment, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fd := int(f.Fd())
	segs := []segment{}
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // no data after off
			break
		}
		if err != nil {
			return nil, fmt.Errorf("SEEK_DATA: %w", err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("SEEK_HOLE: %w", err)
		}
		if hole > size {
			hole = size
		}
		if hole > data {
			segs = append(segs, segment{data, hole - data})
		}
		off = hole
	}
	return segs, nil
}

func sparseMap(segs []segment) []byte {
	m := binary.AppendUvarint(nil, uint64(len(segs)))
	for _, s := range segs {
		m = binary.AppendUvarint(m, uint64(s.offset))
		m = binary.AppendUvarint(m, uint64(s.length))
	}
	return m
}

func copySegments(w io.Writer, p string, segs []segment, buf []byte) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, s := range segs {
		if _, err := io.CopyBuffer(w, io.NewSectionReader(f, s.offset, s.length), buf); err != nil {
			return fmt.Errorf("pack %s: %w", p, err)
		}
	}
	return nil
}

// Unpack extracts a stream written by Pack into dst, which must not exist
// or be empty. Entries may not leave dst: names are clean relative paths,
// every parent is a directory this stream made (never a symlink), and hard
// links point at regular files extracted before. Owners are restored when
// running as root, else left to the caller. Device nodes other than
// overlay whiteouts and extended attributes a sandbox image does not need
// are not made (see keepDevice and keepXattr).
func Unpack(ctx context.Context, r io.Reader, dst string) error {
	zr, err := zstd.NewReader(r)
	if err != nil {
		return err
	}
	defer zr.Close()
	return unpackTar(ctx, tar.NewReader(zr), dst)
}

type dirMeta struct {
	path  string
	hdr   *tar.Header
	isTop bool
}

func unpackTar(ctx context.Context, tr *tar.Reader, dst string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	if ents, err := os.ReadDir(dst); err != nil {
		return err
	} else if len(ents) > 0 {
		return fmt.Errorf("unpack into %s: not empty", dst)
	}
	root := os.Geteuid() == 0
	dirs := map[string]bool{".": true}
	files := map[string]bool{}
	var metas []dirMeta
	buf := make([]byte, 1<<20)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("unpack: reading the archive: %w", err)
		}
		// GNU sparse entries (which Pack never writes) are expanded by
		// the tar reader: a few bytes could claim terabytes of zeros.
		for k := range hdr.PAXRecords {
			if strings.HasPrefix(k, "GNU.sparse.") {
				return fmt.Errorf("unpack: entry %q: GNU sparse entries are not accepted", hdr.Name)
			}
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if name == "" || path.Clean(name) != name || path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("unpack: entry %q: not a clean relative path", hdr.Name)
		}
		parent := path.Dir(name)
		if name != "." && !dirs[parent] {
			return fmt.Errorf("unpack: entry %q: its parent is not a directory of the archive", hdr.Name)
		}
		p := filepath.Join(dst, filepath.FromSlash(name))
		mode := uint32(hdr.Mode & 0o7777)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if name != "." {
				if dirs[name] || files[name] {
					return fmt.Errorf("unpack: entry %q twice", hdr.Name)
				}
				if err := os.Mkdir(p, 0o700); err != nil {
					return err
				}
				dirs[name] = true
			}
			metas = append(metas, dirMeta{path: p, hdr: hdr, isTop: name == "."})
			continue
		case tar.TypeReg:
			if err := unpackFile(tr, hdr, p, buf); err != nil {
				return fmt.Errorf("unpack %s: %w", name, err)
			}
			files[name] = true
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, p); err != nil {
				return err
			}
		case tar.TypeLink:
			if !files[hdr.Linkname] {
				return fmt.Errorf("unpack: hard link %q to %q, which is no file extracted before", hdr.Name, hdr.Linkname)
			}
			if err := os.Link(filepath.Join(dst, filepath.FromSlash(hdr.Linkname)), p); err != nil {
				return err
			}
			files[name] = true
			continue // the metadata is the first name's
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			if hdr.Typeflag != tar.TypeFifo && !keepDevice(hdr) {
				continue // not made: see keepDevice
			}
			typ := uint32(unix.S_IFIFO)
			switch hdr.Typeflag {
			case tar.TypeChar:
				typ = unix.S_IFCHR
			case tar.TypeBlock:
				typ = unix.S_IFBLK
			}
			if err := unix.Mknod(p, typ|0o600, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
				return fmt.Errorf("unpack %s: mknod: %w", name, err)
			}
		default:
			return fmt.Errorf("unpack: entry %q: unsupported type %q", hdr.Name, hdr.Typeflag)
		}
		if err := applyMeta(p, hdr, mode, root); err != nil {
			return fmt.Errorf("unpack %s: %w", name, err)
		}
	}
	// Directories last, deepest first: their modes may forbid writing and
	// their times change with every entry made inside.
	for i := len(metas) - 1; i >= 0; i-- {
		m := metas[i]
		if err := applyMeta(m.path, m.hdr, uint32(m.hdr.Mode&0o7777), root); err != nil {
			return fmt.Errorf("unpack %s: %w", m.hdr.Name, err)
		}
	}
	return nil
}

func unpackFile(tr *tar.Reader, hdr *tar.Header, p string, buf []byte) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if rs, ok := hdr.PAXRecords[paxSparse]; ok {
		real, err := strconv.ParseInt(rs, 10, 64)
		if err != nil || real < 0 {
			return fmt.Errorf("bad %s record %q", paxSparse, rs)
		}
		if real > maxSparseSize {
			return fmt.Errorf("sparse file of %d bytes: larger than the 1 TiB limit", real)
		}
		br := bufio.NewReaderSize(tr, 64<<10)
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return fmt.Errorf("bad sparse map: %w", err)
		}
		if n > maxSparseSegments {
			return fmt.Errorf("bad sparse map: %d segments, more than the limit of %d", n, maxSparseSegments)
		}
		segs := make([]segment, 0, min(n, 1<<16))
		var end int64
		for i := uint64(0); i < n; i++ {
			off, err1 := binary.ReadUvarint(br)
			length, err2 := binary.ReadUvarint(br)
			if err1 != nil || err2 != nil || off > uint64(real) || length > uint64(real)-off || int64(off) < end {
				return errors.New("bad sparse map")
			}
			segs = append(segs, segment{int64(off), int64(length)})
			end = int64(off + length)
		}
		for _, sg := range segs {
			if _, err := f.Seek(sg.offset, io.SeekStart); err != nil {
				return err
			}
			if n, err := io.CopyBuffer(f, io.LimitReader(br, sg.length), buf); err != nil {
				return err
			} else if n != sg.length {
				return errors.New("sparse entry: data shorter than its map")
			}
		}
		if _, err := br.ReadByte(); err != io.EOF {
			return errors.New("sparse entry: data after the last segment")
		}
		if err := f.Truncate(real); err != nil {
			return err
		}
	} else if _, err := io.CopyBuffer(f, tr, buf); err != nil {
		return err
	}
	return f.Close()
}

// applyMeta sets owner, mode, extended attributes and times, in that
// order (a chown clears setuid bits and security.capability).
func applyMeta(p string, hdr *tar.Header, mode uint32, root bool) error {
	symlink := hdr.Typeflag == tar.TypeSymlink
	if root {
		if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	}
	if !symlink {
		if err := unix.Chmod(p, mode); err != nil {
			return err
		}
	}
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, xattrPrefix)
		if !ok || !keepXattr(name) {
			continue
		}
		if err := unix.Lsetxattr(p, name, []byte(v), 0); err != nil {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	return nil
}
