//go:build linux

package imagebuild

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// extractUpper makes the upper directory dir (which must not exist) from
// the tar stream of diffImages. The stream comes from the unprivileged
// disk reader, which read what the guest wrote, so every entry is checked
// again here: names are clean relative paths whose parent is a directory
// of the stream (never a symlink), each name appears once, hard links
// name a non-directory extracted before, device nodes are 0/0 whiteouts
// or lie under dev/, and overlayfs' own trusted.overlay.* attributes are
// refused. Owners, modes, extended attributes and times are set as the
// entries arrive; those of directories last, deepest first.
func extractUpper(ctx context.Context, r io.Reader, dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("creating the layer directory: %w", err)
	}
	tr := tar.NewReader(r)
	dirs := map[string]bool{".": true}
	files := map[string]bool{}
	var metas []*tar.Header
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
			return fmt.Errorf("reading the layer stream: %w", err)
		}
		for k := range hdr.PAXRecords {
			if strings.HasPrefix(k, "GNU.sparse.") {
				return fmt.Errorf("layer stream: entry %q: GNU sparse entries are not accepted", hdr.Name)
			}
			if strings.HasPrefix(k, paxXattr+"trusted.overlay.") {
				return fmt.Errorf("layer stream: entry %q: overlay attribute %s refused", hdr.Name, k)
			}
		}
		name := hdr.Name
		if name == "" || name == "." || path.Clean(name) != name || path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("layer stream: entry %q: not a clean relative path", hdr.Name)
		}
		if !dirs[path.Dir(name)] {
			return fmt.Errorf("layer stream: entry %q: its parent is not a directory of the stream", hdr.Name)
		}
		if dirs[name] || files[name] {
			return fmt.Errorf("layer stream: entry %q twice", hdr.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(p, 0o700); err != nil {
				return fmt.Errorf("creating %s in the layer: %w", name, err)
			}
			dirs[name] = true
			metas = append(metas, hdr)
			continue
		case tar.TypeReg:
			if err := writeFile(tr, p, buf); err != nil {
				return fmt.Errorf("writing %s in the layer: %w", name, err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, p); err != nil {
				return fmt.Errorf("creating link %s in the layer: %w", name, err)
			}
		case tar.TypeLink:
			if !files[hdr.Linkname] {
				return fmt.Errorf("layer stream: hard link %q to %q, which is no file extracted before", hdr.Name, hdr.Linkname)
			}
			if err := os.Link(filepath.Join(dir, filepath.FromSlash(hdr.Linkname)), p); err != nil {
				return fmt.Errorf("linking %s in the layer: %w", name, err)
			}
			files[name] = true
			continue // the metadata is the first name's
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			typ := uint32(unix.S_IFIFO)
			switch hdr.Typeflag {
			case tar.TypeChar:
				typ = unix.S_IFCHR
			case tar.TypeBlock:
				typ = unix.S_IFBLK
			}
			whiteout := hdr.Typeflag == tar.TypeChar && hdr.Devmajor == 0 && hdr.Devminor == 0
			if typ != unix.S_IFIFO && !whiteout && !strings.HasPrefix(name, "dev/") ||
				hdr.Typeflag == tar.TypeBlock && hdr.Devmajor == 0 && hdr.Devminor == 0 {
				return userErr("the step created the device node /%s: device nodes are only supported in /dev and not as 0/0", name)
			}
			if hdr.Devmajor < 0 || hdr.Devmajor > 0xfff || hdr.Devminor < 0 || hdr.Devminor > 0xfffff {
				return fmt.Errorf("layer stream: entry %q: device %d:%d", hdr.Name, hdr.Devmajor, hdr.Devminor)
			}
			if err := unix.Mknod(p, typ|0o600, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
				return fmt.Errorf("creating node %s in the layer: %w", name, err)
			}
			if whiteout {
				files[name] = true
				continue // root-owned 0600, as diffTrees always made them
			}
		default:
			return fmt.Errorf("layer stream: entry %q: unsupported type %q", hdr.Name, hdr.Typeflag)
		}
		files[name] = true
		if err := setHeaderMeta(p, hdr); err != nil {
			return err
		}
	}
	for i := len(metas) - 1; i >= 0; i-- {
		if err := setHeaderMeta(filepath.Join(dir, filepath.FromSlash(metas[i].Name)), metas[i]); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(r io.Reader, p string, buf []byte) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.CopyBuffer(f, r, buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// setHeaderMeta sets owner, permission bits, extended attributes and
// times of hdr on p, in that order (a chown clears setuid bits and
// security.capability).
func setHeaderMeta(p string, hdr *tar.Header) error {
	if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("chown %s: %w", p, err)
	}
	if hdr.Typeflag != tar.TypeSymlink {
		if err := unix.Chmod(p, uint32(hdr.Mode&0o7777)); err != nil {
			return fmt.Errorf("chmod %s: %w", p, err)
		}
	}
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, paxXattr)
		if !ok {
			continue
		}
		if err := unix.Lsetxattr(p, name, []byte(v), 0); err != nil {
			return fmt.Errorf("setting %s on %s: %w", name, p, err)
		}
	}
	at := hdr.AccessTime
	if at.IsZero() {
		at = hdr.ModTime
	}
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting times of %s: %w", p, err)
	}
	return nil
}
