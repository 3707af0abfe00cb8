//go:build linux

package imagebuild

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// owner is a uid/gid pair; nil means "keep the context's owner as root".
type owner struct{ uid, gid int }

// copyInto copies items of the build context c into rootfs. All writes go
// through an os.Root so that symlinks inside the image cannot redirect them
// outside of it; all reads go through the context's (resolveCopy left no
// symlink in a source path but the entry itself).
func copyInto(c *buildContext, rootfs string, items []copyItem, own *owner, chmod fs.FileMode) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return fmt.Errorf("opening layer: %w", err)
	}
	defer root.Close()
	uid, gid := 0, 0
	if own != nil {
		uid, gid = own.uid, own.gid
	}
	for _, it := range items {
		rel := strings.TrimPrefix(path.Clean(it.dst), "/")
		if rel == "" {
			continue // the destination root itself
		}
		if err := mkdirAllOwned(root, path.Dir(rel), uid, gid); err != nil {
			return err
		}
		mode := it.fi.Mode().Perm() | (it.fi.Mode() & (fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky))
		if chmod != 0 {
			mode = chmod
		}
		if it.fi.IsDir() {
			if fi, err := root.Lstat(rel); err == nil && fi.IsDir() {
				if err := root.Lchown(rel, uid, gid); err != nil {
					return fmt.Errorf("chown /%s: %w", rel, err)
				}
				if err := root.Chmod(rel, mode); err != nil {
					return fmt.Errorf("chmod /%s: %w", rel, err)
				}
				continue
			}
			if err := root.RemoveAll(rel); err != nil {
				return fmt.Errorf("replacing /%s: %w", rel, err)
			}
			if err := root.Mkdir(rel, 0o700); err != nil {
				return fmt.Errorf("creating /%s: %w", rel, err)
			}
		} else {
			if fi, err := root.Lstat(rel); err == nil && fi.IsDir() {
				return userErr("cannot overwrite directory /%s with a file", rel)
			}
			if err := root.RemoveAll(rel); err != nil {
				return fmt.Errorf("replacing /%s: %w", rel, err)
			}
			switch {
			case it.fi.Mode().IsRegular():
				if err := copyFileRoot(c, root, it.src, rel); err != nil {
					return err
				}
			case it.fi.Mode()&fs.ModeSymlink != 0:
				t, err := c.root.Readlink(it.src)
				if err != nil {
					return fmt.Errorf("reading link %s: %w", it.src, err)
				}
				if err := root.Symlink(t, rel); err != nil {
					return fmt.Errorf("creating link /%s: %w", rel, err)
				}
				if err := root.Lchown(rel, uid, gid); err != nil {
					return fmt.Errorf("chown /%s: %w", rel, err)
				}
				continue
			default:
				return userErr("%s: only regular files, directories and symlinks can be copied", it.dst)
			}
		}
		if err := root.Lchown(rel, uid, gid); err != nil {
			return fmt.Errorf("chown /%s: %w", rel, err)
		}
		if err := root.Chmod(rel, mode); err != nil {
			return fmt.Errorf("chmod /%s: %w", rel, err)
		}
		if err := root.Chtimes(rel, it.fi.ModTime(), it.fi.ModTime()); err != nil {
			return fmt.Errorf("setting times of /%s: %w", rel, err)
		}
	}
	return nil
}

// mkdirAllOwned creates dir and its missing parents (0755, owned by
// uid:gid) inside root.
func mkdirAllOwned(root *os.Root, dir string, uid, gid int) error {
	if dir == "." || dir == "" || dir == "/" {
		return nil
	}
	fi, err := root.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return userErr("/%s is not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("stat /%s: %w", dir, err)
	}
	if err := mkdirAllOwned(root, path.Dir(dir), uid, gid); err != nil {
		return err
	}
	if err := root.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating /%s: %w", dir, err)
	}
	if err := root.Lchown(dir, uid, gid); err != nil {
		return fmt.Errorf("chown /%s: %w", dir, err)
	}
	return nil
}

func copyFileRoot(c *buildContext, root *os.Root, src, rel string) error {
	in, err := c.openRegular(src, src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("creating /%s: %w", rel, err)
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copying /%s: %w", rel, err)
	}
	return nil
}

// existsIn reports whether p exists inside rootfs (following symlinks
// within it).
func existsIn(rootfs, p string) (bool, error) {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return false, fmt.Errorf("opening layer: %w", err)
	}
	defer root.Close()
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		rel = "." // WORKDIR /
	}
	_, err = root.Stat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}
