package imagebuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/ext4"
)

// maxTreeDepth bounds the directory depth read from an image (PATH_MAX
// allows no more than 2048).
const maxTreeDepth = 2048

// diffImages writes to tw the overlayfs-style upper directory, as a tar
// stream, that turns the file system image old into cur: entries that
// are new or changed (with owner, mode, times, extended attributes; hard
// links as tar links to the first path), a 0/0 character device for each
// deleted entry (a deleted directory is one whiteout), and the
// directories leading to them, each with cur's metadata. extractUpper
// makes the directory from the stream and applyUpper applies it.
//
// "Unchanged" is decided conservatively from the inodes and must hold for
// everything: file type, permission bits, owner, size, inode number, mtime
// and ctime to the nanosecond, device numbers, symlink target and extended
// attributes. old and cur are the same file system before and after a
// step (the pristine root image and the VM's disk), where an untouched
// file keeps its inode and ctime (the kernel sets ctime on every change
// and userspace cannot set it); any doubt makes the entry changed, which
// only costs a copy. New device nodes are refused outside /dev (as by the
// OCI applier) and as 0/0 (which would read as a whiteout); sockets are
// left out (a path that was something else becomes a whiteout).
//
// Both images are untrusted input read by internal/ext4; a directory that
// appears twice in cur (a loop) is an error.
func diffImages(old, cur *ext4.FS, tw *tar.Writer) error {
	d := &imageDiffer{old: old, cur: cur, tw: tw, made: map[string]bool{".": true},
		dirs: map[string]*ext4.Inode{}, seen: map[uint32]bool{}, groups: map[uint32]*linkGroup{}}
	croot, err := cur.Inode(ext4.RootIno)
	if err != nil {
		return err
	}
	oroot, err := old.Inode(ext4.RootIno)
	if err != nil {
		return err
	}
	if !croot.IsDir() || !oroot.IsDir() {
		return fmt.Errorf("%w: the root inode is no directory", ext4.ErrCorrupt)
	}
	d.seen[croot.Ino] = true
	d.dirs["."] = croot
	if err := d.walk(".", croot, oroot, 0); err != nil {
		return err
	}
	return d.linkGroups()
}

// linkGroup is the paths in cur of one multiply-linked inode.
type linkGroup struct {
	paths   []string
	changed bool
}

type imageDiffer struct {
	old, cur *ext4.FS
	tw       *tar.Writer
	made     map[string]bool        // upper directories written (rel)
	dirs     map[string]*ext4.Inode // cur's directories by rel
	seen     map[uint32]bool        // cur's directory inodes visited
	groups   map[uint32]*linkGroup
	order    []uint32
	data     uint64 // bytes of file contents written
}

// walk compares the directory rel of cur (cdir) with the one of old (odir,
// nil when old has no directory there).
func (d *imageDiffer) walk(rel string, cdir, odir *ext4.Inode, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("%w: directories nested deeper than %d", ext4.ErrCorrupt, maxTreeDepth)
	}
	cents, err := d.cur.ReadDir(cdir)
	if err != nil {
		return err
	}
	olds := map[string]uint32{}
	var oents []ext4.DirEntry
	if odir != nil {
		if oents, err = d.old.ReadDir(odir); err != nil {
			return err
		}
		for _, e := range oents {
			olds[e.Name] = e.Ino
		}
	}
	curNames := map[string]bool{}
	for _, e := range cents {
		curNames[e.Name] = true
		crel := path.Join(rel, e.Name)
		ci, err := d.cur.Inode(e.Ino)
		if err != nil {
			return err
		}
		if crel == imageLostFound && ci.IsDir() {
			continue
		}
		var oi *ext4.Inode
		if ino, ok := olds[e.Name]; ok {
			if oi, err = d.old.Inode(ino); err != nil {
				return err
			}
		}
		changed, err := d.differs(oi, ci)
		if err != nil {
			return fmt.Errorf("/%s: %w", crel, err)
		}
		if t := ci.Type(); changed && (t == ext4.TypeChar || t == ext4.TypeBlock) &&
			((ci.Major == 0 && ci.Minor == 0) || !strings.HasPrefix(crel, "dev/")) {
			return userErr("the step created the device node /%s: device nodes are only supported in /dev and not as 0/0", crel)
		}
		switch {
		case ci.IsDir():
			if d.seen[ci.Ino] {
				return fmt.Errorf("%w: directory inode %d appears twice (at /%s): a loop", ext4.ErrCorrupt, ci.Ino, crel)
			}
			d.seen[ci.Ino] = true
			d.dirs[crel] = ci
			if changed {
				if err := d.mkdirs(crel); err != nil {
					return err
				}
			}
			var sub *ext4.Inode
			if oi != nil && oi.IsDir() {
				sub = oi
			}
			if err := d.walk(crel, ci, sub, depth+1); err != nil {
				return err
			}
		case ci.Type() == ext4.TypeSocket:
			if changed && oi != nil {
				if err := d.whiteout(crel); err != nil {
					return err
				}
			}
		case ci.Links > 1:
			g := d.groups[ci.Ino]
			if g == nil {
				g = &linkGroup{}
				d.groups[ci.Ino] = g
				d.order = append(d.order, ci.Ino)
			}
			g.paths = append(g.paths, crel)
			g.changed = g.changed || changed
		case changed:
			if err := d.mkdirs(rel); err != nil {
				return err
			}
			if err := d.entry(crel, ci, ""); err != nil {
				return err
			}
		}
	}
	// Whiteouts for what old has here and cur has not.
	for _, e := range oents {
		if curNames[e.Name] {
			continue
		}
		orel := path.Join(rel, e.Name)
		if orel == imageLostFound {
			oi, err := d.old.Inode(e.Ino)
			if err != nil {
				return err
			}
			if oi.IsDir() {
				continue
			}
		}
		if err := d.whiteout(orel); err != nil {
			return err
		}
	}
	return nil
}

// differs reports whether ci differs from oi (nil: old has no entry there).
func (d *imageDiffer) differs(oi, ci *ext4.Inode) (bool, error) {
	if oi == nil {
		return true, nil
	}
	if oi.Mode != ci.Mode || oi.UID != ci.UID || oi.GID != ci.GID || oi.Size != ci.Size || oi.Ino != ci.Ino ||
		oi.Major != ci.Major || oi.Minor != ci.Minor || oi.Mtime != ci.Mtime || oi.Ctime != ci.Ctime {
		return true, nil
	}
	if ci.Type() == ext4.TypeSymlink {
		ot, err := d.old.Readlink(oi)
		if err != nil {
			return false, err
		}
		ct, err := d.cur.Readlink(ci)
		if err != nil {
			return false, err
		}
		if ot != ct {
			return true, nil
		}
	}
	ox, err := d.old.Xattrs(oi)
	if err != nil {
		return false, err
	}
	cx, err := d.cur.Xattrs(ci)
	if err != nil {
		return false, err
	}
	return !slices.EqualFunc(ox, cx, func(a, b ext4.Xattr) bool {
		return a.Name == b.Name && bytes.Equal(a.Value, b.Value)
	}), nil
}

// mkdirs writes the upper directory rel and its ancestors, with cur's
// metadata.
func (d *imageDiffer) mkdirs(rel string) error {
	if d.made[rel] {
		return nil
	}
	if err := d.mkdirs(path.Dir(rel)); err != nil {
		return err
	}
	in := d.dirs[rel]
	if in == nil {
		return fmt.Errorf("layer directory %s: not read from the image", rel)
	}
	if err := d.entry(rel, in, ""); err != nil {
		return err
	}
	d.made[rel] = true
	return nil
}

// whiteout writes a 0/0 character device at rel.
func (d *imageDiffer) whiteout(rel string) error {
	if err := d.mkdirs(path.Dir(rel)); err != nil {
		return err
	}
	return d.tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeChar, Mode: 0o600, Format: tar.FormatPAX})
}

// linkGroups writes every path of a multiply-linked inode of which one
// path changed, the first as an entry and the others as links to it.
func (d *imageDiffer) linkGroups() error {
	for _, ino := range d.order {
		g := d.groups[ino]
		if !g.changed {
			continue
		}
		in, err := d.cur.Inode(ino)
		if err != nil {
			return err
		}
		for i, rel := range g.paths {
			if err := d.mkdirs(path.Dir(rel)); err != nil {
				return err
			}
			link := ""
			if i > 0 {
				link = g.paths[0]
			}
			if err := d.entry(rel, in, link); err != nil {
				return err
			}
		}
	}
	return nil
}

// entry writes the tar entry of in at rel (a hard link to link if set).
func (d *imageDiffer) entry(rel string, in *ext4.Inode, link string) error {
	hdr := &tar.Header{Name: rel, Format: tar.FormatPAX}
	if link != "" {
		hdr.Typeflag, hdr.Linkname = tar.TypeLink, link
		return d.tw.WriteHeader(hdr)
	}
	hdr.Mode = int64(in.Mode & 0o7777)
	hdr.Uid, hdr.Gid = int(in.UID), int(in.GID)
	hdr.ModTime = time.Unix(in.Mtime.Sec, int64(in.Mtime.Nsec))
	hdr.AccessTime = time.Unix(in.Atime.Sec, int64(in.Atime.Nsec))
	xs, err := d.cur.Xattrs(in)
	if err != nil {
		return fmt.Errorf("/%s: %w", rel, err)
	}
	for _, x := range xs {
		if strings.HasPrefix(x.Name, "trusted.overlay.") {
			continue // never the layer's own overlay metadata
		}
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords[paxXattr+x.Name] = string(x.Value)
	}
	var body io.Reader
	switch in.Type() {
	case ext4.TypeDir:
		hdr.Typeflag = tar.TypeDir
	case ext4.TypeRegular:
		// A sparse file larger than the whole disk would be written out
		// in full on the host.
		if in.Size > uint64(d.cur.Size()) {
			return userErr("the step left /%s, a sparse file of %d bytes: larger than its disk (%d bytes), not supported in a layer",
				rel, in.Size, d.cur.Size())
		}
		// Nor may all files together be more than twice the disk (blocks
		// shared between inodes would let a crafted image claim more).
		d.data += in.Size
		if d.data > 2*uint64(d.cur.Size()) {
			return userErr("the step's changes hold more than %d bytes of file data, twice its disk: not supported in a layer", 2*d.cur.Size())
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(in.Size)
		if body, err = d.cur.Open(in); err != nil {
			return fmt.Errorf("/%s: %w", rel, err)
		}
	case ext4.TypeSymlink:
		hdr.Typeflag = tar.TypeSymlink
		if hdr.Linkname, err = d.cur.Readlink(in); err != nil {
			return fmt.Errorf("/%s: %w", rel, err)
		}
	case ext4.TypeChar, ext4.TypeBlock:
		hdr.Typeflag = tar.TypeChar
		if in.Type() == ext4.TypeBlock {
			hdr.Typeflag = tar.TypeBlock
		}
		hdr.Devmajor, hdr.Devminor = int64(in.Major), int64(in.Minor)
	case ext4.TypeFIFO:
		hdr.Typeflag = tar.TypeFifo
	default:
		return fmt.Errorf("/%s: file type 0%o not supported in a layer", rel, in.Type())
	}
	if err := d.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("/%s: %w", rel, err)
	}
	if body != nil {
		if _, err := io.Copy(d.tw, body); err != nil {
			return fmt.Errorf("/%s: %w", rel, err)
		}
	}
	return nil
}

// paxXattr is the PAX record prefix of extended attributes (as GNU tar and
// archive/tar name them).
const paxXattr = "SCHILY.xattr."

// imageLostFound is made by mkfs.ext4 in every image (and filled by e2fsck
// with what it recovers): a file system artefact, never part of a layer.
const imageLostFound = "lost+found"
