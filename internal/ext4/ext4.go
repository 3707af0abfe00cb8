// Package ext4 reads an ext4 file system image in user space, read-only:
// the superblock and group descriptors, inodes (type, permission bits,
// owner, size, link count, times with nanoseconds, device numbers),
// directories (linear and htree-indexed, read linearly), file contents
// through extent trees (holes and unwritten extents read as zeros), fast
// and slow symlinks, and extended attributes (in the inode and in an
// external block, with POSIX ACLs converted to the form getxattr(2)
// returns).
//
// It exists so that the host never mounts an image a guest wrote (see
// internal/imagebuild's DiskSource): the image is untrusted input, and
// every offset, length and count read from it is checked against the
// image and against fixed limits before it is used. A malformed image
// gives an error, never a panic, an endless loop or an unbounded
// allocation. Checksums are not verified (the image was checked by e2fsck
// before, and a checksum does not make crafted data safe), and neither is
// the journal replayed: the caller passes an image with a clean journal.
//
// Supported: the features mkfs.ext4 and the Linux kernel use by default
// (extents, 64bit, flex_bg, metadata_csum, dir_index, large_dir, huge_file,
// extra_isize, orphan files, ...). Refused with an error: block-mapped
// (pre-extent) files, inline data, external-inode xattr values (ea_inode),
// meta_bg, encryption, casefolding, a journal that still needs recovery.
package ext4

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Limits on what one image may make the reader do.
const (
	maxDirSize     = 256 << 20 // bytes of one directory
	maxExtentNodes = 1 << 16   // extent-tree blocks read for one file
	maxExtents     = 1 << 20   // extents of one file
	maxExtentDepth = 5         // as the kernel
	maxSymlink     = 4096      // PATH_MAX
	maxXattrBytes  = 1 << 20   // names and values of one inode
	blockCacheSize = 1024      // metadata blocks kept
)

// ErrCorrupt wraps every error about the image's content.
var ErrCorrupt = errors.New("ext4: corrupt or unsupported image")

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// Feature bits (the kernel's fs/ext4/ext4.h).
const (
	incompatFiletype   = 0x2
	incompatRecover    = 0x4
	incompatJournalDev = 0x8
	incompatMetaBG     = 0x10
	incompatExtents    = 0x40
	incompat64bit      = 0x80
	incompatMMP        = 0x100
	incompatFlexBG     = 0x200
	incompatEAInode    = 0x400
	incompatDirData    = 0x1000
	incompatCsumSeed   = 0x2000
	incompatLargeDir   = 0x4000
	incompatInlineData = 0x8000
	incompatEncrypt    = 0x10000
	incompatCasefold   = 0x20000

	roCompatHugeFile = 0x8

	supportedIncompat = incompatFiletype | incompatExtents | incompat64bit | incompatMMP |
		incompatFlexBG | incompatCsumSeed | incompatLargeDir
)

// Inode flags.
const (
	flagHugeFile   = 0x40000
	flagExtents    = 0x80000
	flagEAInode    = 0x200000
	flagInlineData = 0x10000000
)

// File types of Inode.Mode (S_IFMT).
const (
	TypeMask    = 0xF000
	TypeFIFO    = 0x1000
	TypeChar    = 0x2000
	TypeDir     = 0x4000
	TypeBlock   = 0x6000
	TypeRegular = 0x8000
	TypeSymlink = 0xA000
	TypeSocket  = 0xC000
)

// RootIno is the inode of the root directory.
const RootIno = 2

// FS is an open image. It is not safe for concurrent use.
type FS struct {
	r          io.ReaderAt
	size       int64 // bytes of the image
	blockSize  int64
	blocks     uint64
	inodes     uint32
	perGroup   uint32 // inodes per group
	inodeSize  int64
	descSize   int64
	groups     uint32
	gdtBlock   uint64
	hugeFile   bool
	cache      map[uint64][]byte
	cacheOrder []uint64
	dirBytes   uint64 // read by ReadDir so far
}

// maxDirBytes is what ReadDir may read in all: twice the image, at least
// 1 GiB (each directory is read once per comparison).
func (f *FS) maxDirBytes() uint64 { return max(1<<30, 2*uint64(f.size)) }

// Open reads the superblock of the image r of size bytes.
func Open(r io.ReaderAt, size int64) (*FS, error) {
	sb := make([]byte, 1024)
	if size < 2048 {
		return nil, corrupt("image of %d bytes: too small", size)
	}
	if _, err := r.ReadAt(sb, 1024); err != nil {
		return nil, fmt.Errorf("ext4: reading the superblock: %w", err)
	}
	le := binary.LittleEndian
	if le.Uint16(sb[0x38:]) != 0xEF53 {
		return nil, corrupt("no ext4 superblock (bad magic)")
	}
	logBS := le.Uint32(sb[0x18:])
	if logBS > 6 {
		return nil, corrupt("block size 2^(10+%d)", logBS)
	}
	f := &FS{r: r, size: size, blockSize: 1024 << logBS, cache: map[uint64][]byte{}}
	incompat := le.Uint32(sb[0x60:])
	if incompat&incompatRecover != 0 {
		return nil, corrupt("the journal needs recovery (run e2fsck first)")
	}
	if bad := incompat &^ supportedIncompat; bad != 0 {
		names := map[uint32]string{incompatJournalDev: "journal_dev", incompatMetaBG: "meta_bg", incompatEAInode: "ea_inode",
			incompatDirData: "dirdata", incompatInlineData: "inline_data", incompatEncrypt: "encrypt", incompatCasefold: "casefold"}
		var ns []string
		for bit := uint32(1); bit != 0; bit <<= 1 {
			if bad&bit != 0 {
				n := names[bit]
				if n == "" {
					n = fmt.Sprintf("0x%x", bit)
				}
				ns = append(ns, n)
			}
		}
		return nil, corrupt("unsupported feature(s): %s", strings.Join(ns, ", "))
	}
	if incompat&incompatExtents == 0 {
		return nil, corrupt("not an extent-based file system")
	}
	f.hugeFile = le.Uint32(sb[0x64:])&roCompatHugeFile != 0
	f.blocks = uint64(le.Uint32(sb[0x4:]))
	f.descSize = 32
	if incompat&incompat64bit != 0 {
		f.blocks |= uint64(le.Uint32(sb[0x150:])) << 32
		f.descSize = int64(le.Uint16(sb[0xFE:]))
		if f.descSize < 64 || f.descSize > 1024 || f.descSize&(f.descSize-1) != 0 {
			return nil, corrupt("group descriptor size %d", f.descSize)
		}
	}
	if f.blocks == 0 || f.blocks > uint64(size/f.blockSize) {
		return nil, corrupt("%d blocks of %d bytes: larger than the image (%d bytes)", f.blocks, f.blockSize, size)
	}
	f.inodes = le.Uint32(sb[0x0:])
	f.perGroup = le.Uint32(sb[0x28:])
	perGroupBlocks := uint64(le.Uint32(sb[0x20:]))
	first := uint64(le.Uint32(sb[0x14:]))
	if perGroupBlocks == 0 || f.perGroup == 0 || first >= f.blocks || (f.blockSize == 1024) != (first == 1) {
		return nil, corrupt("bad geometry (blocks per group %d, inodes per group %d, first data block %d)",
			perGroupBlocks, f.perGroup, first)
	}
	groups := (f.blocks - first + perGroupBlocks - 1) / perGroupBlocks
	if groups > 1<<32-1 || uint64(f.perGroup)*groups < uint64(f.inodes) || f.inodes < RootIno {
		return nil, corrupt("bad geometry (%d groups, %d inodes)", groups, f.inodes)
	}
	f.groups = uint32(groups)
	f.inodeSize = 128
	if le.Uint32(sb[0x4C:]) >= 1 {
		f.inodeSize = int64(le.Uint16(sb[0x58:]))
	}
	if f.inodeSize < 128 || f.inodeSize > f.blockSize || f.inodeSize&(f.inodeSize-1) != 0 {
		return nil, corrupt("inode size %d", f.inodeSize)
	}
	f.gdtBlock = first + 1
	if end := int64(f.gdtBlock)*f.blockSize + int64(groups)*f.descSize; end > size {
		return nil, corrupt("group descriptors past the end of the image")
	}
	return f, nil
}

// Size returns the size of the image in bytes.
func (f *FS) Size() int64 { return f.size }

// readAt reads len(b) bytes at off, which must lie inside the image.
func (f *FS) readAt(b []byte, off int64) error {
	if off < 0 || off > f.size || int64(len(b)) > f.size-off {
		return corrupt("read of %d bytes at %d: past the end of the image", len(b), off)
	}
	if _, err := f.r.ReadAt(b, off); err != nil {
		return fmt.Errorf("ext4: reading the image: %w", err)
	}
	return nil
}

// block returns the metadata block n (cached; callers must not modify it).
func (f *FS) block(n uint64) ([]byte, error) {
	if b, ok := f.cache[n]; ok {
		return b, nil
	}
	if n >= f.blocks {
		return nil, corrupt("block %d: past the end of the file system (%d blocks)", n, f.blocks)
	}
	b := make([]byte, f.blockSize)
	if err := f.readAt(b, int64(n)*f.blockSize); err != nil {
		return nil, err
	}
	if len(f.cacheOrder) >= blockCacheSize {
		delete(f.cache, f.cacheOrder[0])
		f.cacheOrder = f.cacheOrder[1:]
	}
	f.cache[n] = b
	f.cacheOrder = append(f.cacheOrder, n)
	return b, nil
}

// Time is an inode timestamp.
type Time struct {
	Sec  int64
	Nsec uint32
}

// Inode is the metadata of one inode.
type Inode struct {
	Ino                 uint32
	Mode                uint16 // type and permission bits
	UID, GID            uint32
	Size                uint64
	Links               uint16
	Atime, Mtime, Ctime Time
	Major, Minor        uint32 // of a device
	Flags               uint32

	blocks    uint64 // 512-byte units
	fileACL   uint64
	iblock    [60]byte
	extra     []byte // the inode past its first 128 bytes (in-inode xattrs follow the extra fields)
	extraSize int64
}

// Type is the file type bits of Mode.
func (in *Inode) Type() uint16 { return in.Mode & TypeMask }

// IsDir reports whether in is a directory.
func (in *Inode) IsDir() bool { return in.Type() == TypeDir }

// Inode reads inode ino.
func (f *FS) Inode(ino uint32) (*Inode, error) {
	if ino < 1 || ino > f.inodes {
		return nil, corrupt("inode %d out of range (1-%d)", ino, f.inodes)
	}
	le := binary.LittleEndian
	group, index := (ino-1)/f.perGroup, int64((ino-1)%f.perGroup)
	doff := int64(f.gdtBlock)*f.blockSize + int64(group)*f.descSize
	gdb, err := f.block(uint64(doff / f.blockSize))
	if err != nil {
		return nil, err
	}
	d := gdb[doff%f.blockSize:]
	table := uint64(le.Uint32(d[0x8:]))
	if f.descSize >= 64 {
		table |= uint64(le.Uint32(d[0x28:])) << 32
	}
	off := index * f.inodeSize
	ib, err := f.block(table + uint64(off/f.blockSize))
	if err != nil {
		return nil, fmt.Errorf("inode %d: %w", ino, err)
	}
	raw := ib[off%f.blockSize : off%f.blockSize+f.inodeSize]
	in := &Inode{
		Ino:     ino,
		Mode:    le.Uint16(raw[0x0:]),
		UID:     uint32(le.Uint16(raw[0x2:])) | uint32(le.Uint16(raw[0x78:]))<<16,
		GID:     uint32(le.Uint16(raw[0x18:])) | uint32(le.Uint16(raw[0x7A:]))<<16,
		Size:    uint64(le.Uint32(raw[0x4:])) | uint64(le.Uint32(raw[0x6C:]))<<32,
		Links:   le.Uint16(raw[0x1A:]),
		Flags:   le.Uint32(raw[0x20:]),
		blocks:  uint64(le.Uint32(raw[0x1C:])),
		fileACL: uint64(le.Uint32(raw[0x68:])) | uint64(le.Uint16(raw[0x76:]))<<32,
	}
	if f.hugeFile {
		in.blocks |= uint64(le.Uint16(raw[0x74:])) << 32
		if in.Flags&flagHugeFile != 0 {
			in.blocks *= uint64(f.blockSize / 512)
		}
	}
	copy(in.iblock[:], raw[0x28:0x28+60])
	if f.inodeSize > 128 {
		extraSize := int64(le.Uint16(raw[0x80:]))
		if extraSize%4 != 0 || 128+extraSize > f.inodeSize {
			return nil, corrupt("inode %d: extra size %d", ino, extraSize)
		}
		in.extra = slices.Clone(raw[128:])
		ext := func(field int64) (uint32, bool) { // offset from 0x80
			if field+4 > extraSize {
				return 0, false
			}
			return le.Uint32(in.extra[field:]), true
		}
		in.Ctime = decodeTime(le.Uint32(raw[0xC:]), ext, 0x4)
		in.Mtime = decodeTime(le.Uint32(raw[0x10:]), ext, 0x8)
		in.Atime = decodeTime(le.Uint32(raw[0x8:]), ext, 0xC)
		in.extraSize = extraSize
	} else {
		none := func(int64) (uint32, bool) { return 0, false }
		in.Ctime = decodeTime(le.Uint32(raw[0xC:]), none, 0)
		in.Mtime = decodeTime(le.Uint32(raw[0x10:]), none, 0)
		in.Atime = decodeTime(le.Uint32(raw[0x8:]), none, 0)
	}
	if in.Flags&flagInlineData != 0 {
		return nil, corrupt("inode %d: inline data is not supported", ino)
	}
	if in.Flags&flagEAInode != 0 {
		return nil, corrupt("inode %d: an xattr value inode in the tree", ino)
	}
	switch in.Type() {
	case TypeChar, TypeBlock:
		// fs/ext4/inode.c: old encoding in i_block[0], new in i_block[1].
		if old := le.Uint32(in.iblock[0:]); old != 0 {
			in.Major, in.Minor = (old>>8)&0xff, old&0xff
		} else {
			n := le.Uint32(in.iblock[4:])
			in.Major, in.Minor = (n&0xfff00)>>8, (n&0xff)|((n>>12)&0xfff00)
		}
	case TypeFIFO, TypeDir, TypeRegular, TypeSymlink, TypeSocket:
	default:
		return nil, corrupt("inode %d: unknown file type 0%o", ino, in.Type())
	}
	return in, nil
}

func decodeTime(sec uint32, extra func(int64) (uint32, bool), field int64) Time {
	t := Time{Sec: int64(int32(sec))}
	if x, ok := extra(field); ok {
		t.Sec += int64(x&3) << 32
		t.Nsec = x >> 2
		if t.Nsec > 999999999 {
			t.Nsec = 0
		}
	}
	return t
}

// extent is a run of logical blocks mapped to physical ones (phys 0: a
// hole or unwritten, read as zeros).
type extent struct {
	logical, length, phys uint64
}

// extents returns the sorted, non-overlapping extents of in.
func (f *FS) extents(in *Inode) ([]extent, error) {
	if in.Flags&flagExtents == 0 {
		return nil, corrupt("inode %d: block-mapped files are not supported", in.Ino)
	}
	var out []extent
	nodes := 0
	var walk func(node []byte, depth int) error
	walk = func(node []byte, want int) error {
		le := binary.LittleEndian
		if len(node) < 12 || le.Uint16(node[0:]) != 0xF30A {
			return corrupt("inode %d: bad extent header", in.Ino)
		}
		entries, max, depth := int(le.Uint16(node[2:])), int(le.Uint16(node[4:])), int(le.Uint16(node[6:]))
		if entries > max || 12+12*max > len(node) || depth > maxExtentDepth || (want >= 0 && depth != want) {
			return corrupt("inode %d: bad extent node (entries %d, max %d, depth %d)", in.Ino, entries, max, depth)
		}
		for i := 0; i < entries; i++ {
			e := node[12+12*i:]
			if depth == 0 {
				n := uint64(le.Uint16(e[4:]))
				unwritten := n > 32768
				if unwritten {
					n -= 32768
				}
				if n == 0 {
					return corrupt("inode %d: empty extent", in.Ino)
				}
				x := extent{logical: uint64(le.Uint32(e[0:])), length: n,
					phys: uint64(le.Uint16(e[6:]))<<32 | uint64(le.Uint32(e[8:]))}
				if x.phys+x.length > f.blocks || x.phys+x.length < x.phys {
					return corrupt("inode %d: extent points past the end of the file system", in.Ino)
				}
				if x.phys < f.gdtBlock {
					return corrupt("inode %d: extent points at the superblock", in.Ino)
				}
				if unwritten {
					x.phys = 0
				}
				if k := len(out); k > 0 && out[k-1].logical+out[k-1].length > x.logical {
					return corrupt("inode %d: overlapping or unsorted extents", in.Ino)
				}
				if len(out) >= maxExtents {
					return corrupt("inode %d: more than %d extents", in.Ino, maxExtents)
				}
				out = append(out, x)
				continue
			}
			nodes++
			if nodes > maxExtentNodes {
				return corrupt("inode %d: more than %d extent tree blocks", in.Ino, maxExtentNodes)
			}
			child := uint64(le.Uint16(e[8:]))<<32 | uint64(le.Uint32(e[4:]))
			b, err := f.block(child)
			if err != nil {
				return fmt.Errorf("inode %d: extent tree: %w", in.Ino, err)
			}
			if err := walk(b, depth-1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(in.iblock[:], -1); err != nil {
		return nil, err
	}
	return out, nil
}

// fileReader reads a file's contents: size bytes, holes as zeros.
type fileReader struct {
	f    *FS
	ext  []extent
	size uint64
	off  uint64
}

// Open returns a reader of the contents of the regular file or slow
// symlink in.
func (f *FS) Open(in *Inode) (io.Reader, error) {
	if t := in.Type(); t != TypeRegular && t != TypeSymlink {
		return nil, corrupt("inode %d: not a file", in.Ino)
	}
	ext, err := f.extents(in)
	if err != nil {
		return nil, err
	}
	return &fileReader{f: f, ext: ext, size: in.Size}, nil
}

func (r *fileReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	bs := uint64(r.f.blockSize)
	if rest := r.size - r.off; uint64(len(p)) > rest {
		p = p[:rest]
	}
	lb := r.off / bs
	// Drop extents that end before this block.
	for len(r.ext) > 0 && r.ext[0].logical+r.ext[0].length <= lb {
		r.ext = r.ext[1:]
	}
	var n uint64
	switch {
	case len(r.ext) == 0 || r.ext[0].logical > lb:
		// A hole up to the next extent.
		end := r.size
		if len(r.ext) > 0 {
			end = min(end, r.ext[0].logical*bs)
		}
		n = min(uint64(len(p)), end-r.off)
		clear(p[:n])
	default:
		x := r.ext[0]
		end := min(r.size, (x.logical+x.length)*bs)
		n = min(uint64(len(p)), end-r.off)
		if x.phys == 0 {
			clear(p[:n])
		} else if err := r.f.readAt(p[:n], int64((x.phys+lb-x.logical)*bs+r.off%bs)); err != nil {
			return 0, err
		}
	}
	r.off += n
	return int(n), nil
}

// Readlink returns the target of the symlink in.
func (f *FS) Readlink(in *Inode) (string, error) {
	if in.Type() != TypeSymlink {
		return "", corrupt("inode %d: not a symlink", in.Ino)
	}
	if in.Size == 0 || in.Size > maxSymlink {
		return "", corrupt("inode %d: symlink of %d bytes", in.Ino, in.Size)
	}
	// As the kernel's ext4_inode_is_fast_symlink: no data blocks (those of
	// an xattr block aside).
	var eaBlocks uint64
	if in.fileACL != 0 {
		eaBlocks = uint64(f.blockSize / 512)
	}
	var target []byte
	if in.blocks == eaBlocks {
		if in.Size >= 60 {
			return "", corrupt("inode %d: fast symlink of %d bytes", in.Ino, in.Size)
		}
		target = in.iblock[:in.Size]
	} else {
		r, err := f.Open(in)
		if err != nil {
			return "", err
		}
		if target, err = io.ReadAll(r); err != nil {
			return "", err
		}
	}
	if i := slices.Index(target, 0); i >= 0 {
		target = target[:i] // as nd_terminate_link
	}
	return string(target), nil
}

// DirEntry is one entry of a directory ("." and ".." are left out).
type DirEntry struct {
	Name string
	Ino  uint32
}

// ReadDir returns the entries of the directory in, sorted by name.
func (f *FS) ReadDir(in *Inode) ([]DirEntry, error) {
	if !in.IsDir() {
		return nil, corrupt("inode %d: not a directory", in.Ino)
	}
	if in.Size > maxDirSize || in.Size%uint64(f.blockSize) != 0 {
		return nil, corrupt("inode %d: directory of %d bytes", in.Ino, in.Size)
	}
	ext, err := f.extents(in)
	if err != nil {
		return nil, err
	}
	// Every block of a directory is allocated (the kernel calls a hole
	// "Directory hole found" and fails), so reading one costs no more
	// than its blocks on disk; all directories together may not read
	// more than maxDirBytes.
	bs := uint64(f.blockSize)
	nblocks := in.Size / bs
	var next uint64
	for _, x := range ext {
		if x.logical >= nblocks {
			break
		}
		if x.logical != next || x.phys == 0 {
			return nil, corrupt("directory inode %d: a hole at block %d", in.Ino, next)
		}
		next = x.logical + x.length
	}
	if next < nblocks {
		return nil, corrupt("directory inode %d: a hole at block %d", in.Ino, next)
	}
	f.dirBytes += in.Size
	if f.dirBytes > f.maxDirBytes() {
		return nil, corrupt("more than %d bytes of directories read", f.maxDirBytes())
	}
	le := binary.LittleEndian
	var out []DirEntry
	seen := map[string]bool{}
	buf := make([]byte, f.blockSize)
	for lb := uint64(0); lb < nblocks; lb++ {
		for len(ext) > 0 && ext[0].logical+ext[0].length <= lb {
			ext = ext[1:]
		}
		if err := f.readAt(buf, int64((ext[0].phys+lb-ext[0].logical)*bs)); err != nil {
			return nil, fmt.Errorf("directory inode %d: %w", in.Ino, err)
		}
		for off := 0; off < len(buf); {
			if len(buf)-off < 8 {
				return nil, corrupt("directory inode %d: truncated entry", in.Ino)
			}
			e := buf[off:]
			ino, recLen, nameLen := le.Uint32(e[0:]), int(le.Uint16(e[4:])), int(e[6])
			if recLen == 0 || recLen == 65535 { // ext4_rec_len_from_disk, 64 KiB blocks
				recLen = 65536
			}
			if recLen < 12 || recLen%4 != 0 || recLen > len(buf)-off || 8+nameLen > recLen {
				return nil, corrupt("directory inode %d: bad entry (length %d, name length %d)", in.Ino, recLen, nameLen)
			}
			off += recLen
			if ino == 0 {
				continue // unused, an htree node or the checksum tail
			}
			name := string(e[8 : 8+nameLen])
			if name == "." || name == ".." {
				continue
			}
			if name == "" || strings.ContainsAny(name, "/\x00") {
				return nil, corrupt("directory inode %d: bad name %q", in.Ino, name)
			}
			if seen[name] {
				return nil, corrupt("directory inode %d: %q twice", in.Ino, name)
			}
			if ino > f.inodes {
				return nil, corrupt("directory inode %d: %q names inode %d, out of range", in.Ino, name, ino)
			}
			seen[name] = true
			out = append(out, DirEntry{Name: name, Ino: ino})
		}
	}
	slices.SortFunc(out, func(a, b DirEntry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
