//go:build linux

package imagebuild

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Whiteout markers of the OCI image layer format.
const (
	whPrefix = ".wh."
	whOpaque = ".wh..wh..opq"
)

const openNoFollow = unix.O_NOFOLLOW

// layerApplier unpacks OCI/Docker image layers, in order, into one root
// filesystem directory. Paths are resolved inside the root (symlinks in
// earlier entries are followed with chroot semantics and can never lead
// outside it); absolute names, ".." components and device nodes outside
// /dev are refused.
type layerApplier struct {
	root string
	dirs map[string]*tar.Header // directory times, restored at the end
}

func newLayerApplier(root string) *layerApplier {
	return &layerApplier{root: root, dirs: map[string]*tar.Header{}}
}

// cleanName validates a tar entry name and returns it relative to the root
// ("" for the root itself).
func cleanName(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", userErr("image layer entry %q: absolute path", name)
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", userErr("image layer entry %q: \"..\" in path", name)
		}
	}
	p := path.Clean("/" + name)
	return strings.TrimPrefix(p, "/"), nil
}

// resolve maps rel (relative to the root) to a host path whose parent
// directories are resolved inside the root; the last component is not
// followed.
func (a *layerApplier) resolve(rel string) (string, error) {
	if rel == "" {
		return a.root, nil
	}
	dir, err := a.resolveDir(path.Dir(rel), 0)
	if err != nil {
		return "", err
	}
	return filepath.Join(a.root, dir, path.Base(rel)), nil
}

// resolveDir follows symlinks in rel (chroot semantics) and returns the
// resolved path relative to the root.
func (a *layerApplier) resolveDir(rel string, depth int) (string, error) {
	if depth > 40 {
		return "", userErr("image layer: too many levels of symbolic links at /%s", rel)
	}
	out := ""
	comps := strings.Split(strings.Trim(path.Clean("/"+rel), "/"), "/")
	for i, c := range comps {
		if c == "" || c == "." {
			continue
		}
		next := path.Join(out, c)
		fi, err := os.Lstat(filepath.Join(a.root, next))
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			out = next // missing or not a link: taken literally
			continue
		}
		target, err := os.Readlink(filepath.Join(a.root, next))
		if err != nil {
			return "", fmt.Errorf("reading link /%s: %w", next, err)
		}
		if !path.IsAbs(target) {
			target = path.Join("/", out, target)
		}
		rest := strings.Join(comps[i+1:], "/")
		return a.resolveDir(path.Join(target, rest), depth+1)
	}
	return out, nil
}

// apply unpacks one uncompressed layer tar.
func (a *layerApplier) apply(r io.Reader) error {
	tr := tar.NewReader(r)
	written := map[string]bool{} // entries of this layer (for opaque dirs)
	var opaque []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return userErr("reading image layer: %v", err)
		}
		rel, err := cleanName(h.Name)
		if err != nil {
			return err
		}
		base := path.Base(rel)
		if base == whOpaque {
			opaque = append(opaque, path.Dir(rel))
			continue
		}
		if strings.HasPrefix(base, whPrefix) {
			p, err := a.resolve(path.Join(path.Dir(rel), strings.TrimPrefix(base, whPrefix)))
			if err != nil {
				return err
			}
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("applying whiteout %s: %w", rel, err)
			}
			continue
		}
		if err := a.entry(tr, h, rel); err != nil {
			return err
		}
		written[rel] = true
	}
	// An opaque directory hides everything the lower layers had in it.
	for _, d := range opaque {
		if d == "." {
			d = ""
		}
		if err := a.clearLower(d, written); err != nil {
			return err
		}
	}
	return nil
}

// clearLower removes everything below dir not written by the current layer.
func (a *layerApplier) clearLower(dir string, written map[string]bool) error {
	host, err := a.resolve(dir)
	if err != nil {
		return err
	}
	ents, err := os.ReadDir(host)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("opaque dir /%s: %w", dir, err)
	}
	for _, e := range ents {
		rel := path.Join(dir, e.Name())
		if !written[rel] {
			if err := os.RemoveAll(filepath.Join(host, e.Name())); err != nil {
				return err
			}
			continue
		}
		if e.IsDir() {
			if err := a.clearLower(rel, written); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *layerApplier) entry(tr *tar.Reader, h *tar.Header, rel string) error {
	p, err := a.resolve(rel)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("creating parent of /%s: %w", rel, err)
	}
	fi, statErr := os.Lstat(p)
	exists := statErr == nil
	// Replace anything in the way, except a directory over a directory.
	if exists && !(h.Typeflag == tar.TypeDir && fi.IsDir()) {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("replacing /%s: %w", rel, err)
		}
	}
	mode := uint32(h.Mode & 0o7777)
	switch h.Typeflag {
	case tar.TypeDir:
		if rel != "" && !(exists && fi.IsDir()) {
			if err := os.Mkdir(p, 0o755); err != nil {
				return fmt.Errorf("creating /%s: %w", rel, err)
			}
		}
		a.dirs[p] = h
	case tar.TypeReg:
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("creating /%s: %w", rel, err)
		}
		_, cerr := io.Copy(f, tr)
		if err := f.Close(); cerr == nil {
			cerr = err
		}
		if cerr != nil {
			return fmt.Errorf("writing /%s: %w", rel, cerr)
		}
	case tar.TypeSymlink:
		if err := os.Symlink(h.Linkname, p); err != nil {
			return fmt.Errorf("creating link /%s: %w", rel, err)
		}
	case tar.TypeLink:
		trel, err := cleanName(h.Linkname)
		if err != nil {
			return err
		}
		target, err := a.resolve(trel)
		if err != nil {
			return err
		}
		if tfi, err := os.Lstat(target); err != nil || tfi.IsDir() {
			return userErr("image layer entry %q: hard link to missing or directory %q", h.Name, h.Linkname)
		}
		if err := os.Link(target, p); err != nil {
			return fmt.Errorf("linking /%s: %w", rel, err)
		}
		return nil // shares the target's inode and metadata
	case tar.TypeChar, tar.TypeBlock:
		if rel != "dev" && !strings.HasPrefix(rel, "dev/") {
			return userErr("image layer entry %q: device node outside /dev", h.Name)
		}
		kind := uint32(unix.S_IFCHR)
		if h.Typeflag == tar.TypeBlock {
			kind = unix.S_IFBLK
		}
		if err := unix.Mknod(p, kind|mode, int(unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor)))); err != nil {
			return fmt.Errorf("creating device /%s: %w", rel, err)
		}
	case tar.TypeFifo:
		if err := unix.Mkfifo(p, mode); err != nil {
			return fmt.Errorf("creating fifo /%s: %w", rel, err)
		}
	default:
		return userErr("image layer entry %q: unsupported type %q", h.Name, h.Typeflag)
	}
	return a.meta(p, h)
}

// meta sets owner, xattrs, mode and times of p from h (chown first so
// that setuid bits and file capabilities survive).
func (a *layerApplier) meta(p string, h *tar.Header) error {
	if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
		return fmt.Errorf("chown %s: %w", p, err)
	}
	for _, k := range slices.Sorted(maps.Keys(h.PAXRecords)) {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok || strings.HasPrefix(name, "trusted.") {
			continue
		}
		if err := unix.Lsetxattr(p, name, []byte(h.PAXRecords[k]), 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("setting xattr %s on %s: %w", name, p, err)
		}
	}
	if h.Typeflag != tar.TypeSymlink {
		if err := unix.Fchmodat(unix.AT_FDCWD, p, uint32(h.Mode&0o7777), 0); err != nil {
			return fmt.Errorf("chmod %s: %w", p, err)
		}
	}
	return setTimes(p, h)
}

func setTimes(p string, h *tar.Header) error {
	at := h.AccessTime
	if at.IsZero() {
		at = h.ModTime
	}
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(h.ModTime.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting times of %s: %w", p, err)
	}
	return nil
}

// finish restores directory times changed by later entries.
func (a *layerApplier) finish() error {
	for p, h := range a.dirs {
		if _, err := os.Lstat(p); err != nil {
			continue // removed by a later layer
		}
		if err := setTimes(p, h); err != nil {
			return err
		}
	}
	return nil
}
